"""Stand-ins for the pieces of megatron-core 0.16.1 that only run on CUDA, so that its model code runs on CPU.

:func:`megatron_on_cpu` makes ``torch.cuda.current_device()`` answer ``cpu``; :func:`seed_on_cpu` keeps
Megatron's named RNG streams on torch's CPU generator (:class:`CpuRNGStatesTracker`); :func:`pick_device`
chooses between CUDA and CPU. The stand-ins of the training loop itself (torch DDP, AdamW, the micro-batch
loop, ``torch.save``) are named in :mod:`curation.pretraining.devices`.
"""

from __future__ import annotations

from curation.telemetry import disable as _disable_telemetry

_disable_telemetry()  # before Kedro, MLflow or the Hub load: nothing phones home (curation.telemetry)

from contextlib import contextmanager


def pick_device(requested: str = "auto") -> str:
    """``cuda`` where torch sees a GPU (or when asked), else ``cpu``; ``cuda`` without a GPU is refused."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA GPU on this machine (use --device cpu)")
    return requested


@contextmanager
def megatron_on_cpu():
    """Let megatron-core's model code run on a machine without CUDA.

    megatron-core 0.16.1 asks ``torch.cuda.current_device()`` for the device of
    tensors it creates during the forward pass even when the model lives on the
    CPU (``RotaryEmbedding.get_emb`` moves its frequencies there at every call;
    the MoE router and experts do the same). Inside this context that call
    answers ``cpu``, so those tensors are made where the model is. Nothing else
    changes: the layers, their arithmetic and their parameters are megatron-core's.
    The pieces that stay CUDA-only are replaced in
    :class:`curation.pretraining.devices.CpuRun`, not patched (each named there).
    """
    import torch

    if torch.cuda.is_available():
        yield
        return
    original = torch.cuda.current_device
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cuda.current_device = original  # type: ignore[assignment]


class CpuRNGStatesTracker:
    """megatron-core's ``CudaRNGStatesTracker`` on torch's CPU generator.

    Megatron's attention forks the named ``model-parallel-rng`` stream around
    its dropout at every forward, and the CUDA tracker keeps its streams as CUDA
    generator states. This one keeps them as CPU generator states, with the same
    names and seeds as ``model_parallel_cuda_manual_seed`` (tensor-parallel rank 0).
    """

    def __init__(self) -> None:
        self.states_: dict = {}

    def is_initialized(self) -> bool:
        return bool(self.states_)

    def reset(self) -> None:
        self.states_ = {}

    def get_states(self) -> dict:
        return dict(self.states_)

    def set_states(self, states: dict) -> None:
        self.states_ = dict(states)

    def add(self, name: str, seed: int) -> None:
        import torch

        if name in self.states_:
            raise Exception(f"rng state {name} already exists")
        saved = torch.get_rng_state()
        torch.manual_seed(seed)
        self.states_[name] = torch.get_rng_state()
        torch.set_rng_state(saved)

    @contextmanager
    def fork(self, name: str = "model-parallel-rng"):
        import torch

        if name not in self.states_:
            raise Exception(f"rng state {name} is not added")
        saved = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(saved)


def seed_on_cpu(seed: int) -> None:
    """``model_parallel_cuda_manual_seed`` for the CPU: torch's seed and the three named streams."""
    import torch
    from megatron.core.tensor_parallel import random as megatron_random

    torch.manual_seed(seed)
    tracker = CpuRNGStatesTracker()
    tracker.add("data-parallel-rng", seed)
    tracker.add("model-parallel-rng", seed + 2718)
    tracker.add("expert-parallel-rng", seed + 1024)
    megatron_random._CUDA_RNG_STATE_TRACKER = tracker
    megatron_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


def _ensure_rng_tracker() -> None:
    """Megatron's attention forks the model-parallel RNG stream; outside training no seed was set."""
    import torch
    from megatron.core.tensor_parallel import random as megatron_random

    tracker = megatron_random.get_cuda_rng_tracker()
    if tracker.is_initialized():
        return
    if torch.cuda.is_available():
        megatron_random.model_parallel_cuda_manual_seed(0)
    else:
        seed_on_cpu(0)
