"""Evaluation: rollouts in the levels (``rollout``, with a follower behind the ``policy`` interface), the
follower's and speaker's test measures (``evaluate``, ``metrics``, BLEU by the local ``metrics_bleu`` script) and
episodes drawn as images (``render``)."""
