# Ordinary Triton model around one executor (see triton_backend/triton_models.py).
from triton_backend.triton_models import InnerModel as TritonPythonModel  # noqa: F401
