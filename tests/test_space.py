"""app.py, the Space: each tab's function on a tiny saved model, the app served over HTTP and called as a user's
browser calls it (gradio_client), bad models named in one line, and a real headless browser's screenshot where
Chromium and its driver are installed (`apt-get install chromium chromium-driver`, `pip install selenium`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
from pathlib import Path

import imageio.v3 as iio
import pytest

gr = pytest.importorskip("gradio")

from model_helpers import build  # noqa: E402

import app  # noqa: E402  (the repository root is on pytest's pythonpath, pyproject.toml)
from msvae_hf.evaluation.rollout import BotPolicy, rollout  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tok) -> dict[str, str]:
    """A tiny MS-VAE and a tiny speaker, saved with their tokenizer."""
    root = tmp_path_factory.mktemp("space_models")
    out = {}
    for kind in ("msvae", "speaker"):
        model = build(kind, tok)
        model.tokenizer = tok
        model.save_pretrained(root / kind)
        out[kind] = str(root / kind)
    return out


def _frames(path: str) -> int:
    return len(iio.imread(path, index=None))


def test_follow_rolls_out_and_the_speaker_describes_the_trajectory(saved, tmp_path):
    gif, text = app.follow(saved["msvae"], "GoToLocal", 1_000_000_007, "go to the red ball", out_dir=str(tmp_path))
    lines = text.splitlines()
    assert lines[0].startswith("mission: ") and lines[1] == "instruction followed: go to the red ball"
    steps = int(lines[2].split(" in ")[1].split()[0])
    assert _frames(gif) == steps + 1 and lines[3].startswith("the speaker says: ")
    bot = rollout(BotPolicy(), "GoToLocal", [1_000_000_007], missions=["go to the red ball"])[0]
    assert f"the bot takes {bot.steps} (SPL " in lines[2]  # beside the bot on the same episode, told the same
    _, default = app.follow(saved["msvae"], "GoToLocal", 1_000_000_007, "  ", out_dir=str(tmp_path))
    mission = default.splitlines()[0].removeprefix("mission: ")
    assert default.splitlines()[1] == f"instruction followed: {mission}"  # empty: the episode's own mission


def test_a_typed_instruction_is_judged_by_itself(saved, tmp_path):
    """Episode 1,000,000,007 of GoToLocal asks for "a green ball"; typed "go to the red ball", the level judges the
    rollout by the red ball (the bot, told it, does it: it walks to the red ball, not a green one)."""
    own = rollout(BotPolicy(), "GoToLocal", [1_000_000_007])[0]
    told = rollout(BotPolicy(), "GoToLocal", [1_000_000_007], missions=["go to the red ball"])[0]
    assert own.instruction == "go to a green ball" and told.success and told.instruction == "go to the red ball"
    _, text = app.follow(saved["msvae"], "GoToLocal", 1_000_000_007, "go to the red ball", out_dir=str(tmp_path))
    lines = text.splitlines()
    assert lines[0] == "mission: go to a green ball" and lines[1] == "instruction followed: go to the red ball"
    assert "(judged by the instruction typed)" in lines[2] and f"the bot takes {told.steps} " in lines[2]
    carried_out = rollout(BotPolicy(), "GoToLocal", [1_000_000_007], missions=["go to the green box"])[0]
    not_carried_out = rollout(BotPolicy(), "GoToLocal", [1_000_000_007], missions=["go to the green box"],
                              max_steps=1)[0]
    assert carried_out.success and not not_carried_out.success
    with pytest.raises(gr.Error, match=r"'go to the blue key': nothing in this room is a blue key; the room holds "
                                       r"green ball, green ball, green box, grey key, .*, yellow key"):
        app.follow(saved["msvae"], "GoToLocal", 1_000_000_007, "go to the blue key", out_dir=str(tmp_path))
    with pytest.raises(gr.Error, match="is not an action"):
        app.follow(saved["msvae"], "GoToLocal", 1_000_000_007, "go the red ball", out_dir=str(tmp_path))
    _, default = app.follow(saved["msvae"], "GoToLocal", 1_000_000_007, "", out_dir=str(tmp_path))
    assert "(judged by the episode's own mission)" in default.splitlines()[2]


def test_requests_keep_only_the_newest_gifs(saved, tmp_path, monkeypatch):
    monkeypatch.setattr(app, "GIF_DIR", tmp_path / "gifs")
    monkeypatch.setattr(app, "KEPT_GIFS", 3)
    shown = [app.bot(saved["speaker"], "GoToLocal", 1_000_000_000 + i)[0] for i in range(5)]
    kept = sorted(p.name for p in (tmp_path / "gifs").iterdir())
    assert kept == sorted(Path(g).name for g in shown[-3:])  # the newest three, nothing else left behind
    assert Path(shown[-1]).read_bytes()[:3] == b"GIF"


def test_one_model_in_memory_for_every_spelling_of_its_folder(saved, monkeypatch):
    app._load_model.cache_clear()
    folder = Path(saved["msvae"])
    monkeypatch.chdir(folder.parent)
    spellings = [folder.name, f"{folder.name}/", f"{folder.name}/.", f"./{folder.name}", str(folder),
                 f"{folder.parent}//{folder.name}"]
    models = [app.load_model(s) for s in spellings]
    assert all(m is models[0] for m in models) and app._load_model.cache_info().currsize == 1


def test_the_bot_plays_and_a_speaker_describes_it(saved, tmp_path):
    gif, text = app.bot(saved["speaker"], "GoToSeqLocal", 1_000_000_001, out_dir=str(tmp_path))
    lines = text.splitlines()
    assert "success in" in lines[2]  # the bot solves its episode
    assert _frames(gif) == int(lines[2].split(" in ")[1].split()[0]) + 1 and lines[3].startswith("the speaker says: ")


def test_bad_models_are_named(saved, tmp_path):
    with pytest.raises(gr.Error, match="this model is a speaker: it cannot follow"):
        app.follow(saved["speaker"], "GoToLocal", 1, "go to the red ball")
    with pytest.raises(gr.Error, match=r"no such folder: '.*nothing' \(a model is a saved folder or a Hub id"):
        app.follow(str(tmp_path / "nothing"), "GoToLocal", 1, "")
    (tmp_path / "empty").mkdir()
    with pytest.raises(gr.Error, match="cannot load a model from"):
        app.follow(str(tmp_path / "empty"), "GoToLocal", 1, "")
    no_tokenizer = tmp_path / "no_tokenizer"
    shutil.copytree(saved["msvae"], no_tokenizer)
    (no_tokenizer / "tokenizer.json").unlink()
    with pytest.raises(gr.Error, match="no tokenizer.json"):
        app.bot(str(no_tokenizer), "GoToLocal", 1)


def test_an_instruction_is_read_as_the_model_reads_it(saved, tmp_path):
    """Case, surrounding punctuation and spaces are normalised; the rollout equals the one told the clean text."""
    _, typed = app.follow(saved["msvae"], "GoToLocal", 1_000_000_007, "  Go to the RED ball. ", out_dir=str(tmp_path))
    _, clean = app.follow(saved["msvae"], "GoToLocal", 1_000_000_007, "go to the red ball", out_dir=str(tmp_path))
    assert typed.splitlines()[1] == "instruction followed: go to the red ball" and typed == clean


def test_unknown_words_are_named_with_the_words_the_model_knows(saved, tok):
    with pytest.raises(gr.Error) as info:
        app.follow(saved["msvae"], "GoToLocal", 1, "go to the crimson ball quickly")
    message = info.value.message
    assert message.startswith("unknown words: crimson, quickly; this model knows: ")
    with pytest.raises(gr.Error, match="unknown words: <eos>;"):  # a special token typed is no word either
        app.follow(saved["msvae"], "GoToLocal", 1, "go to the <eos> ball")
    assert set(message.split("knows: ")[1].split(", ")) >= {"go", "red", "ball"}


def test_an_over_long_instruction_is_refused_before_any_work(saved, monkeypatch):
    monkeypatch.setattr(app, "load_model", lambda source: pytest.fail("loaded a model for a refused request"))
    text = "go to the red ball " * 400
    with pytest.raises(gr.Error, match=rf"the instruction has {len(text)} characters; at most "
                                       rf"{app.MAX_INSTRUCTION_CHARS} are read"):
        app.read_instruction(text, None)
    with pytest.raises(gr.Error, match="the instruction has"):
        app.follow(saved["msvae"], "GoToLocal", 1, text)


@pytest.mark.parametrize("seed", [-1, 1.5, None, float("nan"), float("inf"), 2**31])
def test_bad_seeds_are_named(saved, seed):
    for call in (lambda: app.follow(saved["msvae"], "GoToLocal", seed, ""), lambda: app.bot(saved["msvae"],
                                                                                        "GoToLocal", seed)):
        with pytest.raises(gr.Error, match=rf"the seed must be a whole number from 0 to {app.MAX_SEED}"):
            call()
    with pytest.raises(ValueError, match=rf"the seed must be a whole number from 0 to {app.MAX_SEED}, got "
                                         rf"{re.escape(repr(seed))}"):  # the package's own calls say the same
        load_model_follow(saved, seed)


def _page_texts(demo) -> list[str]:
    return [block.value for block in demo.blocks.values() if isinstance(block, gr.Markdown)]


def test_the_page_says_what_the_served_model_was_measured_to_do(saved, tmp_path):
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    run = tmp_path / "run"
    shutil.copytree(saved["msvae"], run / "best")
    test = {"success_rate": 0.503, "success_rate_other_mission": 0.462, "success_rate_same_room": 0.48, "spl": 0.3267,
            "episodes": 1000}
    (run / "results.json").write_text(json.dumps({"level": "GoToSeqLocal", "test": test}))
    line = f"**{run / 'best'}**, measured over 1000 test episodes (its run's results.json): SR 50.3 %, told another " \
           "episode's mission 46.2 %, told another mission of its room 48.0 %, SPL 0.327"
    assert line in _page_texts(app.build([str(run / "best")]))
    assert app.measured(saved["msvae"]).endswith("not measured (no results.json beside it, no test success rate in "
                                                  "its card): what it does here says nothing of how often it succeeds")
    assert any("not measured" in text for text in _page_texts(app.build([saved["msvae"]])))
    carded = tmp_path / "carded"
    shutil.copytree(saved["msvae"], carded)
    rollouts = {"task_type": "reinforcement-learning", "dataset_type": "x", "dataset_name": "x",
                "dataset_split": "test"}
    data = ModelCardData(model_name="m", eval_results=[
        EvalResult(**rollouts, metric_type="success_rate", metric_value=0.9),
        EvalResult(**rollouts, metric_type="spl", metric_value=0.7)])
    ModelCard.from_template(data).save(carded / "README.md")
    assert app.measured(str(carded)) == f"**{carded}**, measured (its model card): SR 90.0 %, SPL 0.700"


def load_model_follow(saved, seed):
    return app.load_model(saved["msvae"]).follow("GoToLocal", [seed])


def test_the_space_serves_only_its_models_and_offers_their_level_first(saved, tmp_path):
    check = app.served_only([saved["msvae"]], allow_any=False)
    assert check(saved["msvae"]) == saved["msvae"]
    with pytest.raises(gr.Error, match=rf"this Space serves only {saved['msvae']}"):
        check("/etc")
    assert app.served_only([saved["msvae"]], allow_any=True)("/etc") == "/etc"
    run = tmp_path / "run"
    shutil.copytree(saved["msvae"], run / "best")
    (run / "results.json").write_text('{"level": "BabyAI-GoToSeqLocal-v0"}')
    assert app.model_levels(str(run / "best"))[0] == "GoToSeqLocal"
    (run / "results.json").write_text('{"level": "GoToSeqLocal"}')  # a run told --level GoToSeqLocal records that
    assert app.model_levels(str(run / "best"))[0] == "GoToSeqLocal"
    (run / "results.json").write_text('{"level": "NoSuchLevel"}')
    assert app.model_levels(str(run / "best")) == app.LEVELS
    assert sorted(app.model_levels(str(run / "best"))) == sorted(app.LEVELS) == sorted(app.model_levels("x/y"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(saved):
    demo = app.build(saved["msvae"])
    port = _free_port()
    demo.launch(server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def test_the_app_serves_both_tabs_over_http(served):
    from gradio_client import Client

    client = Client(served, verbose=False)
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/follow", "/bot"} <= set(endpoints)
    source = endpoints["/follow"]["parameters"][0]["parameter_default"]
    gif, text = client.predict(source, "GoToLocal", 1_000_000_007, "go to the red ball", api_name="/follow")
    assert Path(gif).is_file() and text.splitlines()[1] == "instruction followed: go to the red ball"
    gif, text = client.predict(source, "GoToSeqLocal", 1_000_000_001, api_name="/bot")
    assert Path(gif).is_file() and "success in" in text


def test_a_stranger_over_http_gets_reasons_not_bare_errors(served, saved):
    """What a visitor may type, sent as the browser sends it: a capitalised instruction with a full stop is read;
    an unknown word, an over-long instruction, a negative seed and a model the Space was not started with each come
    back as their reason, and the server answers the next request."""
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    client = Client(served, verbose=False)
    _, text = client.predict(saved["msvae"], "GoToLocal", 1_000_000_007, "Go to the red ball.", api_name="/follow")
    assert text.splitlines()[1] == "instruction followed: go to the red ball"
    for model, seed, instruction, reason in [
        (saved["msvae"], 1, "go to the crimson ball", "unknown words: crimson; this model knows: "),
        (saved["msvae"], 1, "go to the red ball " * 400, "the instruction has 7600 characters"),
        (saved["msvae"], -1, "", "Value -1 is less than minimum value 0"),  # the page's own check
        ("/etc", 1, "", "/etc is not in the list of choices"),  # Gradio's check; app.served_only behind it
    ]:
        with pytest.raises(AppError, match=re.escape(reason)):
            client.predict(model, "GoToLocal", seed, instruction, api_name="/follow")
    gif, _ = client.predict(saved["msvae"], "GoToSeqLocal", 1_000_000_001, api_name="/bot")
    assert Path(gif).is_file()


def test_forty_requests_at_once_are_each_answered_or_refused_with_a_reason(served, saved):
    """40 requests sent at once (Follow, Bot and bad inputs mixed): each comes back as its result or as one reason
    (its own, or Gradio's "queue is full" past the QUEUE_SIZE waiting); the server then answers the next request at
    once, and its memory grows by less than LOAD_MEMORY_BOUND_MB."""
    import psutil
    from gradio_client import Client

    client = Client(served, verbose=False)
    client.predict(saved["msvae"], "GoToSeqLocal", 1_000_000_001, api_name="/bot")  # the model loaded, warm
    process = psutil.Process()
    before = process.memory_info().rss
    kinds = [
        ((saved["msvae"], "GoToLocal", 1_000_000_007, "go to the red ball"), "/follow", None),
        ((saved["msvae"], "GoToSeqLocal", 1_000_000_001), "/bot", None),
        ((saved["msvae"], "GoToLocal", 1, "go to the crimson ball"), "/follow", "unknown words: crimson"),
        ((saved["msvae"], "GoToLocal", 1_000_000_007, "go to the blue key"), "/follow", "nothing in this room is"),
    ]
    jobs = [(client.submit(*args, api_name=api), reason) for i in range(40)
            for args, api, reason in [kinds[i % len(kinds)]]]
    answered = refused = 0
    for job, reason in jobs:
        try:
            gif, _ = job.result(timeout=300)
            assert reason is None and Path(gif).is_file()
            answered += 1
        except Exception as err:  # noqa: BLE001  (AppError for a reason, QueueError for a full queue)
            message = str(err)
            assert (reason is not None and reason in message) or "queue is full" in message.lower(), message
            refused += 1
    assert answered + refused == 40 and answered >= 1
    started = time.perf_counter()
    gif, _ = client.predict(saved["msvae"], "GoToSeqLocal", 1_000_000_001, api_name="/bot")
    assert Path(gif).is_file() and time.perf_counter() - started < 60  # served, not stuck behind the burst
    assert (process.memory_info().rss - before) / 2**20 < LOAD_MEMORY_BOUND_MB


#: The most the Space's process may grow by over a burst of 40 requests with a tiny model (docs/usage.md).
LOAD_MEMORY_BOUND_MB = 300


def test_both_tabs_share_one_rollout_at_a_time(saved):
    """Follow and Bot wait in one queue: one rollout at a time on the Space's models, at most QUEUE_SIZE waiting."""
    demo = app.build(saved["msvae"])
    clicks = [d for d in demo.fns.values() if d.api_name in ("follow", "bot")]
    assert len(clicks) == 2 and {d.concurrency_id for d in clicks} == {"rollout"}
    assert {d.concurrency_limit for d in clicks} == {1} and demo._queue.max_size == app.QUEUE_SIZE


@pytest.fixture
def browser(served):
    """Headless Chromium on the served page; skipped where Chromium's driver or selenium is missing."""
    if shutil.which("chromedriver") is None:
        pytest.skip("needs Chromium's driver (chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options)
    try:
        driver.get(served)
        yield driver
    finally:
        driver.quit()


def test_a_headless_browser_shows_the_rollout_and_the_speakers_words(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 120)
    button = wait.until(ec.presence_of_element_located(
        (By.XPATH, "//button[contains(@class, 'primary') and normalize-space()='Follow']")))
    browser.execute_script("arguments[0].click();", button)
    wait.until(lambda d: "the speaker says:" in " ".join(
        t.get_attribute("value") or "" for t in d.find_elements(By.TAG_NAME, "textarea")))
    images = wait.until(lambda d: [i for i in d.find_elements(By.TAG_NAME, "img")
                                   if (i.get_attribute("src") or "").endswith(".gif")])
    assert images and images[0].size["width"] > 0
    shot = Path(os.environ.get("MSVAE_SPACE_SCREENSHOT", tmp_path / "space.png"))
    browser.save_screenshot(str(shot))
    assert iio.imread(shot).shape[0] > 0


def test_a_stranger_in_a_headless_browser_reads_the_reasons_in_the_page(browser, saved):
    """Typed into the page as a visitor types: a capitalised instruction with a full stop is followed as the model
    reads it; an unknown word and an over-long instruction each show their reason in the page, and the next request
    is served; the model menu offers only the model the Space was started with."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 120)
    box = wait.until(lambda d: d.find_element(By.XPATH, "//label[contains(., 'instruction (empty')]//textarea"))
    button = browser.find_element(By.XPATH, "//button[contains(@class, 'primary') and normalize-space()='Follow']")

    def follow(instruction: str) -> None:
        browser.execute_script("arguments[0].value = arguments[1];"
                               "arguments[0].dispatchEvent(new Event('input', {bubbles: true}));", box, instruction)
        browser.execute_script("arguments[0].click();", button)

    def outcome() -> str:
        return browser.find_element(By.XPATH, "//label[contains(., 'what happened')]//textarea").get_attribute(
            "value") or ""

    def page_says(text: str) -> bool:
        return text in browser.find_element(By.TAG_NAME, "body").text

    follow("Go to the green ball.")  # the default episode's room holds a green ball and a blue key, no red ball
    wait.until(lambda d: "instruction followed: go to the green ball" in outcome())
    follow("go to the red ball")
    wait.until(lambda d: page_says("nothing in this room is a red ball; the room holds"))
    follow("go to the crimson ball")
    wait.until(lambda d: page_says("unknown words: crimson; this model knows:"))
    follow("go to the red ball " * 400)
    wait.until(lambda d: page_says("the instruction has 7600 characters"))
    follow("go to the blue key")  # served at once after the refusals
    wait.until(lambda d: "instruction followed: go to the blue key" in outcome())
    menus = [c["props"] for c in browser.execute_script("return window.gradio_config.components")
             if c.get("props", {}).get("label") == "model"]
    assert len(menus) == 1 and [choice[0] for choice in menus[0]["choices"]] == [saved["msvae"]]
