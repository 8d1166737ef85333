"""experiments/validation_table.py reads the validation lines a training log prints."""

from __future__ import annotations

import validation_table


def test_read_text_parses_validation_lines(tmp_path):
    log = tmp_path / "run_seed0.txt"
    log.write_text(
        "updates:  10%|#  | 200/2000\n"
        "step 200: valid/success_rate=0.53, valid/mean_steps=106.8, valid/mean_reward=0.3871, valid/bleu=22.09\n"
        "noise\n"
        "step 400: valid/success_rate=0.5, valid/mean_steps=109.5, valid/mean_reward=0.3959, valid/bleu=25.66\n"
    )
    curves = validation_table.read_text(log)
    assert curves == {"valid/bleu": {200: 22.09, 400: 25.66}, "valid/success_rate": {200: 0.53, 400: 0.5}}
