"""The engine: the fast twins of the paper's modules, proven equal to them, and the one switch.

``switch.set_fast(model)`` swaps every fast twin in at once (``fast_attention``: q, k and v from one
product over PyTorch's fused kernel; layer norm and masks prepared once). Decoding adds the
key/value cache (``kv_cache``), oneDNN's linear layers (``onednn``) and int8 or bfloat16 copies
(``precision``); training adds CUDA graphs (``cuda_graphs``). The paper's modules import nothing
from here; every twin reaches the model through ``set_fast`` and the model's public methods.
"""
