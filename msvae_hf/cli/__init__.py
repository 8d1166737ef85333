"""The command-line tools: ``scripts/<name>.py`` and the installed entry points (``msvae-train``, ...) both call
``msvae_hf.cli.<name>.main``."""
