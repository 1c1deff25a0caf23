"""``sciml.tree_util``: pytree utilities (jax.tree_util's names).

Pytrees are nested dict / list / tuple / namedtuple containers, plus classes registered with
:func:`register_pytree_node` or :func:`register_dataclass`; every transform (grad, jit, vmap, optimizers)
accepts them.
"""
from .autodiff.pytree import (flatten as tree_flatten, register_dataclass, register_pytree_node, tree_leaves,
                              tree_map, tree_structure, unflatten as tree_unflatten)

__all__ = ["register_dataclass", "register_pytree_node", "tree_flatten", "tree_leaves", "tree_map",
           "tree_structure", "tree_unflatten"]
