import sciml

sciml.init(arch="cpu", dtype="float64", seed=0)
