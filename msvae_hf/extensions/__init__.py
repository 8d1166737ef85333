"""Studies that go beyond the paper: neither is part of MS-VAE or of its baselines, and nothing in the rest of the
package imports them.

- ``pragmatics``: follower-rescored speaking. A speaker proposes candidate instructions for a trajectory (beam
  search) and a follower rescores them, argmax_y lam log p_S(y | a, o) + (1 - lam) log p_F(a | y, o), with
  ``lam`` chosen on validation pairs: the speaker-follower model's pragmatic inference turned to speaking, which
  the paper does not use on BabyAI (App. D: the speaker "is used only in data augmentation and not in pragmatic
  inference"). Driven by ``scripts/pragmatic_speakers.py``.
- ``pretraining``: self-supervised pre-training of a speaker's observation and trajectory encoders on
  trajectories alone: from the trajectory encoder's state, predict the type and colour of the cell in front of
  the agent when it picks up, drops or opens something and at its last step. It uses unpaired trajectories
  without any instruction; the speaker then trains on the pairs from these weights (``init_from``). Driven by
  ``scripts/pretrain_speaker.py``.

The paper's own use of a speaker on unpaired trajectories, the speaker-follower's pseudo-labels (Sec. 2.3), is
``msvae_hf.data.pseudo_labels``.
"""
