from setuptools import find_packages, setup

setup(
    name="explicit-batching",
    version="0.1.0",
    description="Explicit-control dynamic batching for NVIDIA Triton (Python-backend plugin)",
    packages=find_packages(include=["scheduler_core*", "triton_backend*", "operator_tools*", "sidecar*"]),
    python_requires=">=3.10",
    install_requires=["numpy", "pyyaml", "click", "tqdm", "matplotlib", "prometheus_client"],
    entry_points={"console_scripts": ["explicit-batching = operator_tools.cli:main"]},
)
