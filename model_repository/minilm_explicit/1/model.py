# Explicit-control batching: this model owns its queue (see triton_backend/triton_models.py).
from triton_backend.triton_models import ExplicitModel as TritonPythonModel  # noqa: F401
