"""The Hugging Face Hub: model and run cards (``push``, from the templates of ``card_templates``), pushes, and the
rule that tells a Hub id from a local folder (``repo_ids``)."""
