"""The Triton entry points: each model folder's one-line ``model.py`` imports its class
from here (exported models too, so the name stays).

``InnerModel`` (``inner_model.py``)
    ``minilm``, ``emulated_device`` and the native baselines ``*_native``: an ordinary
    Triton model that runs what Triton hands it as one batch.
``ExplicitModel`` (``explicit_model.py``)
    ``*_explicit``: owns its queue and batches with explicit control.

Which modules import ``triton_python_backend_utils`` (only the server's stub has it; the
unit tests put a fake in its place, ``tests/unit/triton_backend/fake_pb_utils.py``):
``inner_model``, ``explicit_model``, ``runner``, ``answers``, ``decode``,
``control_metrics`` and ``bls``, the ones that touch Triton's request,
response and metric objects. The rest of the adapter (``model_settings``,
``model_loading``, ``intake``, ``tensor_contract``, ``request_decoding``, ``executors``,
...) imports none.
"""

from .explicit_model import ExplicitModel  # noqa: F401
from .inner_model import InnerModel  # noqa: F401
