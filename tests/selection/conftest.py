"""Shared setup for the selection engine tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    # The engine tests use tiny tensors: one thread is faster and does not fight
    # other processes for the cores. Restored afterwards for the rest of the suite.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
