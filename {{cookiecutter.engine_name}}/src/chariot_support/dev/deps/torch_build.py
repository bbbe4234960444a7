"""torch, CPU or CUDA, chosen knowingly: PyPI's Linux torch is the CUDA build, which brings NVIDIA's CUDA libraries and
triton; `--torch cpu` takes PyTorch's CPU-only build from its own index instead, and `--torch cuda` goes back."""

from __future__ import annotations

from pathlib import Path

from chariot_support.dev.deps.pyproject import TORCH_FAMILY, add_dependency, torch_index
from chariot_support.dev.deps.uv import Resolution

COMMAND = "PYTHONPATH=src python -m chariot_support.dev.deps"


def cuda_packages(resolution: Resolution) -> list[str]:
    """The CUDA build's own packages in a resolution: NVIDIA's CUDA libraries (nvidia-*, cuda-*) and triton."""
    return sorted(n for n in resolution.pins if n.startswith(("nvidia-", "cuda-")) or n == "triton")


def cuda_note(resolution: Resolution, pyproject: Path) -> list[str]:
    """What a resolution with PyPI's torch brings, and how to take the CPU-only build instead."""
    if "torch" not in resolution.pins or torch_index(pyproject) is not None:
        return []
    cuda = cuda_packages(resolution)
    if not cuda:
        return []
    libraries = len([n for n in cuda if n != "triton"])
    brings = f"{libraries} CUDA packages (nvidia-*, cuda-*)" + (" and triton" if "triton" in cuda else "")
    return [
        f"torch: {resolution.pins['torch']} is PyPI's Linux build, the CUDA one: it brings {brings}, several GB in"
        " the image (an engine's environment measured 5.8 GB with the CUDA build, 1.35 GB with the CPU-only one: the"
        ' docs/dependencies.md, "torch, CPU or CUDA"). It runs on CPUs too. For a GPU node keep it (`--torch cuda` says so); for'
        " CPUs only, take the CPU-only build from PyTorch's own index:"
        f" `{COMMAND} lock --torch cpu`."
    ]


def direct_torch(pyproject: Path, resolution: Resolution) -> list[str]:
    """Make each of torch, torchvision and torchaudio in the resolution a dependency pyproject.toml lists itself, at
    the version resolved: uv takes a package from the index [tool.uv.sources] names only for those. Returns what it
    added."""
    added = []
    for name in TORCH_FAMILY:
        if name in resolution.pins:
            version = resolution.pins[name].split("==", 1)[1].split("+", 1)[0]
            if add_dependency(pyproject, f"{name}=={version}"):
                added.append(f"{name}=={version}")
    return added


def build_said(resolution: Resolution, pyproject: Path) -> list[str]:
    """Which torch build the lock took, once chosen with --torch."""
    index = torch_index(pyproject)
    if index is not None:
        torch = resolution.pins.get("torch", "no torch in the lock yet; when it comes, it is")
        return [
            f"torch: {torch}, PyTorch's CPU-only build from {index} (pyproject.toml's [[tool.uv.index]] and"
            " [tool.uv.sources]: the lock, the README's install and the image's take torch, torchvision and"
            " torchaudio from there, everything else from PyPI); no CUDA packages."
        ]
    if "torch" not in resolution.pins:
        return ["torch: no torch in the lock yet; when it comes, it is PyPI's build (on Linux, the CUDA one)."]
    cuda = [n for n in cuda_packages(resolution) if n != "triton"]
    return [
        f"torch: {resolution.pins['torch']}, PyPI's build: on Linux the CUDA one, with {len(cuda)} CUDA packages"
        f"{' and triton' if 'triton' in resolution.pins else ''}."
    ]
