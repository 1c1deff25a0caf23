"""sciml.models: Module, Parameter, layers, activations, initialisers, losses.

    >>> net = sm.models.MLP([2, 32, 1], activation=sm.tanh, seed=0)
    >>> y = net.apply(net.params(), x)          # pure function of the parameters
"""
from . import init
from .module import Buffer, Module, Parameter, ParameterList, load_state
from .layers import MLP, Flatten, Identity, Linear, Sequential
from .activations import (ELU, GELU, SELU, Hardtanh, LeakyReLU, LogSoftmax, Mish, ReLU, SiLU, Sigmoid, Sin, Softmax,
                          Softplus, Softsign, Tanh, elu, gelu, hardtanh, leaky_relu, mish, relu, selu, sigmoid, silu, sin,
                          softplus, softsign, tanh)
from . import losses
from .losses import (accuracy, binary_cross_entropy_with_logits, cross_entropy, huber, l1, mse, nll, one_hot)
from .conv import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, Conv1d, Conv2d, Conv3d, ConvTranspose1d,
                   ConvTranspose2d, MaxPool1d, MaxPool2d, Upsample, adaptive_avg_pool1d, adaptive_avg_pool2d,
                   avg_pool1d, avg_pool2d, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, interpolate,
                   max_pool1d, max_pool2d)
from .norm import (BatchNorm1d, BatchNorm2d, Dropout, Embedding, GroupNorm, InstanceNorm1d, InstanceNorm2d, LayerNorm,
                   dropout, group_norm)
from .recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .attention import MultiheadAttention, TransformerEncoderLayer, scaled_dot_product_attention
