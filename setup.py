"""msvae-hf: MS-VAE (Akuzawa et al., IJCAI 2022) as a Hugging Face-native package."""

from setuptools import find_packages, setup

EXPERIMENTS = ["matplotlib>=3.8", "psutil>=5.9", "scipy>=1.11"]

setup(
    name="msvae-hf",
    license="Apache-2.0",
    version="0.1.0",
    description="Multimodal sequential VAE for semi-supervised language instruction following, HF-native",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=[*find_packages(include=["msvae_hf", "msvae_hf.*"]), "msvae_hf.model_cards"],
    package_dir={"msvae_hf.model_cards": "model_cards"},
    package_data={"msvae_hf.model_cards": ["*.md"]},
    python_requires=">=3.10",
    install_requires=[
        # torch is deliberately unpinned: install a build that suits your machine first
        # (README: `pip install torch==2.13.0` takes the CPU wheel here).
        "torch>=2.2",
        "transformers>=4.56",
        "tokenizers>=0.20",
        "datasets>=3.0",
        "accelerate>=1.0",
        "evaluate>=0.4",
        "huggingface_hub>=0.30",
        "safetensors>=0.4",
        "minigrid>=3.0",
        "gymnasium>=1.1",  # AutoresetMode
        "sacrebleu>=2.4",
        "tensorboard>=2.15",
        "tqdm>=4.66",
        "pyyaml>=6.0",
        "jinja2>=3.1",
        "imageio>=2.30",
        "pillow>=10.0",
    ],
    extras_require={
        # app.py, the Space (Gradio pinned, as a Space pins its SDK); dev adds it for tests/test_space.py, whose
        # headless-browser test also needs Chromium and its driver (scripts/install.sh puts them in where it can)
        "space": ["gradio==6.31.0"],
        # experiments/ and benchmarks/ (the studies, their tables, plots and t-tests; the benchmarks' memory readings)
        "experiments": EXPERIMENTS,
        "dev": ["pytest>=8.0", "pytest-timeout>=2.3", "ruff>=0.6", "gradio==6.31.0", "selenium>=4.20", *EXPERIMENTS],
    },
    entry_points={
        "console_scripts": [  # beside scripts/<name>.py, which call the same main
            f"msvae-{name.replace('_', '-')}=msvae_hf.cli.{name}:main"
            for name in ("train", "make_demos", "evaluate", "label_unpaired", "keep_confident", "push_to_hub")
        ],
    },
)
