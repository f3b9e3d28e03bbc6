"""The CPU backend's device-rewriting TorchFunctionMode: patches #2, #3 and #4 of bridge.parallel.cpu_backend.

"cuda" devices (`device=`, `.cuda()`, `.to("cuda" / int)`) run on the CPU, `Tensor.type()` reports the
`torch.cuda.*` type strings Megatron-Core's optimizers check, pinning is dropped. cpu_backend.install()
pushes it once per process, and only without CUDA.
"""

from __future__ import annotations

import warnings
from typing import Any


def is_cuda_device(device: Any, torch: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    # a bare int is a CUDA ordinal in torch's device arguments (bool is an int too: exclude it)
    return isinstance(device, int) and not isinstance(device, bool)


def push_device_mode(torch: Any) -> tuple[Any, str]:
    """Push the mode on this thread's torch-function-mode stack, for good; (the mode, what it changes)."""
    from torch.overrides import TorchFunctionMode

    tensor_cls = torch.Tensor
    is_cuda = is_cuda_device

    def cpu_type_name(name: str) -> str:
        # "torch.FloatTensor" -> "torch.cuda.FloatTensor" (what a GPU parameter reports)
        return "torch.cuda." + name[len("torch.") :] if name.startswith("torch.") else name

    grad_get = tensor_cls.grad.__get__  # a new method-wrapper per lookup: compare with ==, not `is`
    special = frozenset(
        {
            tensor_cls.cuda,
            tensor_cls.pin_memory,
            tensor_cls.record_stream,
            tensor_cls.to,
            tensor_cls.type,
            grad_get,
        }
    )

    def reattributed_grad(getter: Any, tensor: Any) -> Any:
        # torch warns about reading a non-leaf's .grad from the innermost Python frame, which would be
        # __torch_function__ below: warn from the frame that read it, as without the mode, so the
        # message and warning filters (bridge.parallel.quiet_warnings) see the real module.
        if tensor.is_leaf:
            return getter(tensor)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getter(tensor)
        for w in caught:
            warnings.warn(w.message, w.category, stacklevel=3)  # 1: here, 2: __torch_function__, 3: reader
        return value

    class CpuDeviceMode(TorchFunctionMode):
        """Runs "cuda" requests on the CPU and reports CUDA type strings."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if kwargs:
                if "device" in kwargs and is_cuda(kwargs["device"], torch):
                    kwargs = {**kwargs, "device": "cpu"}
                if kwargs.get("pin_memory"):
                    kwargs = {**kwargs, "pin_memory": False}
            else:
                kwargs = {}
            if func not in special:  # the common case: one set lookup
                return func(*args, **kwargs)
            if func is tensor_cls.cuda or func is tensor_cls.pin_memory:
                return args[0]
            if func is tensor_cls.record_stream:
                return None
            if func == grad_get:
                return reattributed_grad(func, args[0])
            if func is tensor_cls.to:
                if len(args) > 1 and is_cuda(args[1], torch):
                    args = (args[0], "cpu", *args[2:])
                return func(*args, **kwargs)
            # Tensor.type
            if len(args) == 1 and "dtype" not in kwargs:
                return cpu_type_name(func(*args, **kwargs))
            kwargs = dict(kwargs)
            target = kwargs.pop("dtype", args[1] if len(args) > 1 else None)
            if isinstance(target, type):
                target = f"{target.__module__}.{target.__name__}"
            if isinstance(target, str):
                target = target.replace("torch.cuda.", "torch.", 1)
            return func(args[0], target, *args[2:], **kwargs)

    mode = CpuDeviceMode()
    mode.__enter__()  # never exited: the mode stays for the life of the process
    return mode, "device='cuda'/.cuda()/.to(cuda)->CPU, Tensor.type()->torch.cuda.*, pinning dropped"
