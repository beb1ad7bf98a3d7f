"""What runs beside the server, outside the Python stub: the launcher that starts
tritonserver (``python -m server_ops.launcher``), the stub supervisor, and the writers of
the intakes' config.pbtxt. Nothing here is imported by a model.
"""
