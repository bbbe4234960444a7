"""The page an engine serves at GET /, in a real browser (Debian's Chromium, driven by Playwright). For every task type
it learns the model from the engine, sends the request the engine README documents and draws the answer as the
engine's own client draws it (client/drawing.py: the same outlines, captions, scores and colours); it shows the
engine's errors as they came, works from the keyboard and behind a gateway's path prefix, hands over the same
request as curl and Python, reaches nothing but the engine, and goes with a setting that leaves every other route as
it was (test_settings.py)."""

import base64
import json
import re
import shutil
import subprocess
import sys
from urllib.parse import urlsplit

import cv2
import numpy as np
import pytest
import requests
from browser import PHONE, chromium, tab
from playwright.sync_api import expect
from proxy import nginx_in_front

from chariot_support.client.drawing import colour_of, marks
from chariot_support.model.tasks import TaskType
from template_paths import ENGINE_TEMPLATE

SCENE = ENGINE_TEMPLATE / "samples" / "scene.png"
PROMPTS = ["What colours are in the picture?", "How many shapes are there?"]
THRESHOLD = 0.3  # keeps something of what every demo finds in the scene (Image Classification's scores: 0.24-0.41)
METADATA = [{"key": "camera", "type": "str", "value": "north gate"}]
PAGE_BYTES = 60_000  # a few tens of kB; measured: 35,218


@pytest.fixture(scope="module")
def browser():
    """One Chromium for every test of the page."""
    with chromium() as running:
        yield running


def opened(where, url: str):
    """The page at `url` in the tab `where`, once it has learnt from the engine which model it serves."""
    where.page.goto(url)
    # Waits go by selectors: a predicate of Playwright's own would be code the page's policy does not let run.
    where.page.locator("#status", has_text="ready").wait_for()
    return where.page


def is_inference(response) -> bool:
    return response.request.method == "POST" and response.url.endswith("/infer/")


def add_metadata(page, rows: list[dict]) -> None:
    for row in rows:
        page.click("#add-metadata")
        page.fill("#metadata-rows tr:last-child .key", row["key"])
        page.select_option("#metadata-rows tr:last-child .type", row["type"])
        page.fill("#metadata-rows tr:last-child .value", row["value"])


def give(page, *files):
    """Give the page `files` (paths, or Playwright's name/mimeType/buffer dicts); the response it got, once shown."""
    with page.expect_response(is_inference) as answered:
        page.set_input_files("#files", list(files))
    response = answered.value
    page.wait_for_selector("#figures figure")
    return response


def printed(page) -> list[str]:
    """The first picture's results as the page lists them: label and score, as a caption is written."""
    rows = page.eval_on_selector_all(
        "figure:first-child .results tbody tr",
        "rows => rows.map(r => [r.querySelector('.label').textContent, r.querySelector('.score').textContent])",
    )
    return [f"{label} {score}".strip() for label, score in rows]


def answers(page) -> list[tuple[str, str]]:
    items = page.eval_on_selector_all(
        "figure:first-child .answers li",
        "items => items.map(li => [li.querySelector('.q').textContent, li.querySelector('.a').textContent])",
    )
    return [tuple(item) for item in items]


def canvas(page, index: int = 0) -> np.ndarray:
    """What the page drew for its `index`th picture (BGR), at the canvas's own resolution."""
    url = page.eval_on_selector_all("figure canvas", "(all, i) => all[i].toDataURL('image/png')", index)
    return cv2.imdecode(np.frombuffer(base64.b64decode(url.split(",", 1)[1]), np.uint8), cv2.IMREAD_COLOR)


def window(image: np.ndarray, x: float, y: float, reach: int) -> np.ndarray:
    x, y = int(round(x)), int(round(y))
    return image[max(y - reach, 0) : y + reach + 1, max(x - reach, 0) : x + reach + 1]


def check_drawn(drawn: np.ndarray, picture: np.ndarray, results: list[dict]) -> None:
    """That the page drew on `picture` (BGR) what the engine's client draws of `results`: every outline's corners
    and the middle of each of its sides in that mark's colour, where the page changed the picture; and nothing at
    all when no result has an outline (labels and answers are listed, not drawn)."""
    height, width = picture.shape[:2]
    k = drawn.shape[1] // width  # small pictures are drawn k times larger
    assert drawn.shape[:2] == (height * k, width * k)
    before = cv2.resize(picture, (width * k, height * k), interpolation=cv2.INTER_NEAREST)
    outlined = [mark for mark in marks(results, width, height) if mark.outlines]
    if not outlined:
        assert np.abs(drawn.astype(int) - before).max() <= 2, "the page drew on a picture whose results have no place"
        return
    reach = (max(2, round(min(width, height) / 240)) + 1) * k  # the outline and its dark edge
    missed = []
    for mark in outlined:
        for outline in mark.outlines:
            middles = (outline + np.roll(outline, -1, axis=0)) / 2
            for x, y in np.vstack([outline, middles]) * k:
                coloured = (np.abs(window(drawn, x, y, 1).astype(int) - mark.colour).max(axis=-1) <= 40).any()
                changed = (window(drawn, x, y, reach) != window(before, x, y, reach)).any()
                if not (coloured and changed):
                    missed.append((mark.caption, round(x / k, 1), round(y / k, 1)))
    assert not missed, f"outline points the page did not draw in their colour (caption, x, y): {missed[:10]}"


# Parametrized here rather than by conftest's session-wide `task`, which pytest orders across files: this file's
# tests stay together, and so does the one browser they share.
@pytest.mark.parametrize("task", list(TaskType), ids=lambda task: task.name.lower())
def test_the_page_draws_and_lists_the_engines_answer_as_the_client_does(browser, task, demo_engine):
    engine = demo_engine(task)
    with tab(browser) as where:
        page = opened(where, f"{engine.url}/")
        # What the page asks for comes from the engine: the model, its task, the actions that task takes.
        assert page.inner_text("#model") == "m-demo" and task.value in page.inner_text("#status")
        assert page.eval_on_selector_all("#action option", "all => all.map(o => o.value)") == list(task.actions)
        assert page.is_visible("#action") == (len(task.actions) > 1)
        assert page.is_visible("#threshold") == (task is not TaskType.IMAGE_TEXT_TO_TEXT)
        assert page.is_visible("#prompts") == (task is TaskType.IMAGE_TEXT_TO_TEXT)
        parameters = {}
        if len(task.actions) > 1:  # not the default, so that what is sent is what was chosen
            page.select_option("#action", task.actions[-1])
            parameters["action"] = task.actions[-1]
        if task is TaskType.IMAGE_TEXT_TO_TEXT:
            page.fill("#prompts", "\n".join(PROMPTS))
            parameters["prompts"] = PROMPTS
        else:
            page.fill("#threshold", str(THRESHOLD))
            parameters["score_threshold"] = THRESHOLD
        add_metadata(page, METADATA)
        response = give(page, SCENE)

        # The request the engine README documents, the file's base64 whole.
        assert response.url == f"{engine.url}/v2/models/m-demo/infer/"
        sent = response.request.post_data_json
        image = base64.b64encode(SCENE.read_bytes()).decode()
        assert sent["inputs"] == [
            {"name": "image-0", "shape": [1], "datatype": "BYTES", "data": [image], "parameters": parameters}
        ]
        assert json.loads(sent["parameters"]["metadata"]) == {"standard_metadata": {}, "extended_metadata": METADATA}
        answer = response.json()
        (results,) = answer["outputs"][0]["data"]
        assert results, "the demo finds something in the scene"

        # Drawn and listed as the client draws it; what was sent and what came back shown, the base64 cut short.
        picture = cv2.imread(str(SCENE))
        check_drawn(canvas(page), picture, results)
        expected = marks(results, picture.shape[1], picture.shape[0])
        if task is TaskType.IMAGE_TEXT_TO_TEXT:
            assert answers(page) == [(f"Q: {mark.prompt}", mark.caption) for mark in expected]
        else:
            assert printed(page) == [mark.caption for mark in expected]
        assert json.loads(page.text_content("#response-json")) == answer
        (shown,) = json.loads(page.text_content("#request-json"))["inputs"][0]["data"]
        assert shown.startswith(image[:48]) and shown.endswith(f"({len(image):,} characters)")
        returned = page.eval_on_selector_all(
            "#returned tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
        )
        assert returned == [[row["key"], row["type"], row["value"]] for row in METADATA]
        assert re.search(r"^\d[\d.,]* ms from sending", page.inner_text("#timing"))

        # Readable at a phone's width: nothing wider than the screen, the JSON and the snippets opened too.
        page.set_viewport_size(PHONE)
        for summary in page.locator("#exchange summary").all():
            summary.click()
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        assert not where.errors and not where.elsewhere(engine.url)


def test_a_file_the_engine_refuses_shows_the_engines_error_as_it_came(browser, demo_engine):
    engine = demo_engine(TaskType.OBJECT_DETECTION)
    with tab(browser) as where:
        page = opened(where, f"{engine.url}/")
        response = give(page, {"name": "notes.png", "mimeType": "image/png", "buffer": b"notes, not a picture"})
        assert response.status == 400
        message = response.json()["error"]
        page.wait_for_selector("#error:visible")
        assert page.inner_text("#error") == f"The engine answered 400 Bad Request: {message}"
        assert "notes.png · this browser cannot show this file" in page.inner_text("figcaption")
        assert "failed" in page.inner_text("#status")
        # The browser's own line for a 4xx answer is the only one in its console.
        assert [e for e in where.errors if "status of 400" not in e] == [] and not where.elsewhere(engine.url)


def test_pictures_dropped_or_pasted_go_in_one_request_and_each_is_drawn(browser, demo_engine):
    engine = demo_engine(TaskType.OBJECT_DETECTION)
    files = [
        (path.name, base64.b64encode(path.read_bytes()).decode()) for path in (SCENE, SCENE.with_name("shapes.jpg"))
    ]
    hand_over = """([event, files]) => {
        const given = new DataTransfer();
        for (const [name, data] of files) {
            const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
            given.items.add(new File([bytes], name, { type: name.endsWith('.png') ? 'image/png' : 'image/jpeg' }));
        }
        const init = { bubbles: true, cancelable: true };
        document.body.dispatchEvent(event === 'drop'
            ? new DragEvent('drop', { ...init, dataTransfer: given })
            : new ClipboardEvent('paste', { ...init, clipboardData: given }));
    }"""
    with tab(browser) as where:
        page = opened(where, f"{engine.url}/")
        for event in ("drop", "paste"):
            with page.expect_response(is_inference) as answered:
                page.evaluate(hand_over, [event, files])
            sent = answered.value.request.post_data_json
            assert [i["name"] for i in sent["inputs"]] == ["image-0", "image-1"]
            assert [i["data"] for i in sent["inputs"]] == [[data] for _, data in files]
            expect(page.locator("figure canvas")).to_have_count(2)
            captions = page.locator("figcaption strong").all_inner_texts()
            assert captions == [name for name, _ in files], event
            for index, output in enumerate(answered.value.json()["outputs"]):
                picture = cv2.imdecode(np.frombuffer(base64.b64decode(files[index][1]), np.uint8), cv2.IMREAD_COLOR)
                check_drawn(canvas(page, index), picture, output["data"][0])
        assert not where.errors


def test_the_page_is_used_from_the_keyboard_and_every_control_is_labelled(browser, demo_engine):
    engine = demo_engine(TaskType.OBJECT_DETECTION)

    def tab_to(page, selector: str) -> None:
        for _ in range(20):
            page.keyboard.press("Tab")
            if page.evaluate("s => document.activeElement.matches(s)", selector):
                return
        raise AssertionError(f"Tab never reached {selector}")

    with tab(browser) as where:
        page = opened(where, f"{engine.url}/")
        # Playwright asks the browser to hand it file choosers once something listens for them, without waiting for
        # the answer: listening from here on, well before Enter, a chooser cannot open before it is intercepted.
        page.on("filechooser", lambda _: None)
        tab_to(page, "#files")
        with page.expect_file_chooser() as chooser:
            page.keyboard.press("Enter")
        with page.expect_response(is_inference):
            chooser.value.set_files(SCENE)
        page.wait_for_selector("#figures figure")
        tab_to(page, "#threshold")
        page.keyboard.type("0.88")
        tab_to(page, "#add-metadata")
        page.keyboard.press("Enter")  # a new row, its key field focused
        page.keyboard.type("site")
        tab_to(page, "#metadata-rows .value")
        page.keyboard.type("north")
        tab_to(page, "#send")
        with page.expect_response(is_inference) as answered:
            page.keyboard.press("Enter")
        sent = answered.value.request.post_data_json
        assert sent["inputs"][0]["parameters"]["score_threshold"] == 0.88
        assert json.loads(sent["parameters"]["metadata"])["extended_metadata"] == [
            {"key": "site", "type": "str", "value": "north"}
        ]
        expect(page.locator(".results tbody tr")).to_have_count(2)  # red 0.91 and blue 0.89 are over 0.88
        unlabelled = page.evaluate(
            """() => [...document.querySelectorAll('input, select, textarea, button')]
                .filter(c => c.checkVisibility() || c.id === 'files')
                .filter(c => !c.labels?.length && !c.getAttribute('aria-label') && !c.textContent.trim())
                .map(c => c.outerHTML)"""
        )
        assert unlabelled == []
        assert not where.errors


def test_the_curl_line_and_the_python_snippet_send_what_the_page_sent(browser, demo_engine, tmp_path):
    """Copied and run where the picture is, each gets the answer the page got: the metadata's quotes, dollars and
    backslashes come through the shell's here-document and Python's literal alike."""
    engine = demo_engine(TaskType.OBJECT_DETECTION)
    with tab(browser) as where:
        page = opened(where, f"{engine.url}/")
        page.fill("#threshold", "0.88")
        add_metadata(page, [{"key": "note", "type": "str", "value": """it's "$HOME" \\ `id` €"""}])
        answer = give(page, SCENE).json()
        curl, python = page.text_content("#curl"), page.text_content("#python")
    shutil.copy(SCENE, tmp_path / SCENE.name)
    by_curl = subprocess.run(["bash", "-c", curl], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    by_python = subprocess.run([sys.executable, "-c", python], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert by_curl.returncode == 0 and by_python.returncode == 0, by_curl.stderr + by_python.stderr
    status, _, printed_json = by_python.stdout.partition(" ")
    assert status == "200"
    for got in (json.loads(by_curl.stdout), json.loads(printed_json)):
        assert {**got, "id": None} == {**answer, "id": None}


def test_behind_a_gateways_path_prefix_the_page_reaches_the_engine_under_it(browser, demo_engine, tmp_path):
    """As Chariot's gateway serves an engine (nginx here takes the prefix off): opened with and without the prefix's
    trailing slash, every request goes under the prefix."""
    prefix = "/api/serve/serve-model-demo-pred/"
    engine = demo_engine(TaskType.IMAGE_TEXT_TO_TEXT)
    with nginx_in_front(engine, tmp_path, prefix=prefix) as url:
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        for address in (f"{url}/", url):
            with tab(browser) as where:
                page = opened(where, address)
                page.fill("#prompts", PROMPTS[0])
                response = give(page, SCENE)
                assert response.url == f"{url}/v2/models/m-demo/infer/" and response.ok
                ((result,),) = response.json()["outputs"][0]["data"]
                assert answers(page) == [(f"Q: {PROMPTS[0]}", result["answer"])]
                assert all(urlsplit(u).path.startswith(prefix.rstrip("/")) for u in where.requested), where.requested
                assert not where.errors and not where.elsewhere(origin)


# Results no demo gives: labels that name no colour (and one not in ASCII), scores exactly halfway at two places,
# a turned box, a region with a hole, a label without a score; none over another.
CRAFTED = [
    {"label": "cat", "score": 0.125, "xmin": 20, "ymin": 20, "xmax": 110, "ymax": 90},
    {"label": "dog", "score": 0.375, "cx": 0.4, "cy": 0.6, "w": 0.3, "h": 0.15, "r": 0.4},
    {
        "label": "person",
        "score": 0.625,
        "contour": [
            [{"x": 200, "y": 150}, {"x": 300, "y": 150}, {"x": 300, "y": 230}, {"x": 200, "y": 230}],
            [{"x": 230, "y": 170}, {"x": 260, "y": 170}, {"x": 260, "y": 200}],
        ],
    },
    {"label": "road sign", "score": 0.875},
    {"label": "café"},
]
# Stages as the W3C Server-Timing header gives them: a description may be quoted, with commas and escapes in it.
SERVER_TIMING = 'queue;dur=0.4, decode;desc="base64, then pixels";dur=2.5, predict;dur=12, odd;desc=x, total;dur=15.1'


def test_any_results_are_drawn_as_the_client_draws_them_and_the_stages_shown(browser, demo_engine):
    """The answer replaced in the browser by results of every kind, with the engine's stages in Server-Timing."""
    engine = demo_engine(TaskType.OBJECT_DETECTION)
    answer = {
        "model_name": "m-demo",
        "outputs": [{"name": "image-0", "datatype": "BYTES", "shape": [1], "data": [CRAFTED]}],
    }
    with tab(browser) as where:
        page = opened(where, f"{engine.url}/")
        page.route(
            "**/infer/",
            lambda route: route.fulfill(status=200, json=answer, headers={"Server-Timing": SERVER_TIMING}),
        )
        give(page, SCENE)
        picture = cv2.imread(str(SCENE))
        check_drawn(canvas(page), picture, CRAFTED)
        expected = marks(CRAFTED, picture.shape[1], picture.shape[0])
        assert printed(page) == [mark.caption for mark in expected]
        assert printed(page)[:4] == ["cat 0.12", "dog 0.38", "person 0.62", "road sign 0.88"]  # as Python rounds
        swatches = page.eval_on_selector_all(
            ".results .swatch", "all => all.map(s => getComputedStyle(s).backgroundColor)"
        )
        assert swatches == ["rgb({}, {}, {})".format(*reversed(colour_of(r["label"]))) for r in CRAFTED]
        stages = page.eval_on_selector_all("#timing tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
        assert stages == [
            ["queue", "0.4 ms"],
            ["decode (base64, then pixels)", "2.5 ms"],
            ["predict", "12 ms"],
            ["odd (x)", ""],
            ["total", "15 ms"],
        ]
        assert not where.errors


def test_the_page_is_small_and_its_policy_lets_it_reach_only_the_engine(demo_engine):
    """Served whole from the package, a few tens of kB, with no address of anywhere else in it; its script and style
    the only ones allowed to run, and the usual hardening headers. The browser tests above show that the policy lets
    the page work (a refusal is a console error)."""
    engine = demo_engine(TaskType.OBJECT_DETECTION)
    page = requests.get(f"{engine.url}/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert len(page.content) < PAGE_BYTES, len(page.content)
    assert not re.search(r"https?://|//[a-z]", page.text, re.I), "the page names an address"
    policy = dict(directive.split(" ", 1) for directive in page.headers["content-security-policy"].split("; "))
    assert policy.pop("script-src").startswith("'sha256-") and policy.pop("style-src").startswith("'sha256-")
    assert policy == {
        "default-src": "'none'",
        "img-src": "data:",
        "connect-src": "'self'",
        "base-uri": "'none'",
        "form-action": "'none'",
        "frame-ancestors": "'none'",
    }
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "no-referrer"
    head = requests.head(f"{engine.url}/", timeout=10)
    assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == str(len(page.content))
    refused = requests.post(f"{engine.url}/", json={}, timeout=10)
    assert (refused.status_code, refused.json()) == (405, {"error": "POST is not allowed on /"})


def test_both_readmes_show_the_pages_screenshot_and_it_stays_small():
    """scripts/page-screenshots takes it from a demo engine's real answer; docs/ goes into every engine unrendered."""
    picture = ENGINE_TEMPLATE / "docs" / "page.png"
    assert "](docs/page.png)" in (ENGINE_TEMPLATE / "README.md").read_text()
    assert f"]({ENGINE_TEMPLATE.name}/docs/page.png)" in (ENGINE_TEMPLATE.parent / "README.md").read_text()
    assert picture.read_bytes().startswith(b"\x89PNG") and picture.stat().st_size < 80_000  # measured: 28,031
