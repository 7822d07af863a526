from __future__ import annotations

import os

import torch
from hypothesis import settings

# Two cores are shared by everything on the CI machine; one thread is faster for small tensors.
torch.set_num_threads(1)

settings.register_profile("ci", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
