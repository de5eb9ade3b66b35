"""Every figure in README.md and docs/*.md comes from committed JSON, measured quietly.

(a) each ``<!-- bench:NAME:VIEW -->`` block is exactly what scripts/doc_figures.py renders
from docs/img/NAME.json, or its placeholder while that JSON does not exist; every JSON a
doc shows was recorded on a quiet machine; docs/img holds no chart or JSON no doc shows.
(b) outside the blocks, nothing that looks like a measurement (MiB/s, ms, µs, s/GiB,
seconds, ``1.38x``, a percentage about speed, a table of such) unless the JSON the page
shows holds the same number, or it is on ``ALLOWED`` with the reason it is no
measurement.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import doc_blocks as blocks
from scripts import doc_figures
from tests.unit import bench_fixtures

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit

PAGES = [p.relative_to(ROOT).as_posix() for p in doc_figures.docs()]

ALLOWED: dict[tuple[str, str], str] = {
    ("docs/benchmarks.md", "100 ms"): "the AWS-like link's first-byte latency: a setting, "
    "AWS's published figure (cited in bench/lib/latency_proxy.py)",
    ("docs/benchmarks.md", "85 MB/s"): "the AWS-like link's rate cap per connection: a "
    "setting, the published per-connection S3 figure",
    ("docs/benchmarks.md", "85-90 MB/s"): "AWS's per-connection throughput for one GET "
    "stream (field notes): published, not measured here",
    ("docs/benchmarks.md", "15 ms"): "the lookup benchmark's added latency: a setting",
    ("docs/benchmarks.md", "1 ms"): "the lookup benchmark's scheduler step: a setting",
    ("docs/vllm-tier.md", "85-90 MB/s"): "AWS's per-connection throughput for one GET stream "
    "(field notes): published, not measured here",
    ("docs/benchmarks.md", "20%"): "the threshold above which rounds disagree: a rule",
    ("docs/vllm-tier.md", "80%"): "the share of the wait budget a lookup's loads must fit "
    "in: a setting (s3kv/vllm/_cost.py's MARGIN)",
    ("docs/benchmarks.md", "2x"): "RGW's memstore holds about twice the stored bytes: sizing",
    ("docs/operations.md", "30.0 MiB/s"): "an example of the progress line's format, not a "
    "measurement",
    ("docs/vllm-tier.md", "50 ms"): "how often the tier reads its I/O process's socket "
    "when the doorbell is silent: a setting (LOOK_SECONDS)",
    ("docs/vllm-tier.md", "0.5 s"): "the I/O process's first restart backoff: a setting "
    "(FIRST_BACKOFF_SECONDS)",
}


def page_jsons(text: str, page: str = "README.md") -> list[dict]:
    """The JSON documents a page's blocks show (those that exist), and the committed
    evidence JSON it links (``[JSON](../bench/evidence/NAME.json)``)."""
    names = {name for name, _, _ in blocks.blocks(text)}
    shown = [json.loads(p.read_text()) for n in sorted(names)
             if (p := doc_figures.json_path(n)).exists()]
    here = (ROOT / page).parent
    linked = [(here / link).resolve() for link in _evidence_links(text)]
    return shown + [json.loads(p.read_text()) for p in linked if p.is_file()]


def _evidence_links(text: str) -> list[str]:
    import re

    return re.findall(r"\]\(((?:\.\./)*bench/evidence/[^)]+\.json)\)", text)


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_what_its_json_renders(page: str) -> None:
    path = ROOT / page
    text = path.read_text()
    for name, view, body in blocks.blocks(text):
        want = doc_figures.block(name, view, path)
        assert body.rstrip("\n") == want, (
            f"{page}: bench:{name}:{view} differs from docs/img/{name}.json; run "
            "`.venv/bin/python scripts/doc_figures.py`")
        if want == doc_figures.placeholder(name, view):
            assert not doc_figures.json_path(name).exists()


@pytest.mark.parametrize("page", PAGES)
def test_no_measured_figure_outside_the_blocks(page: str) -> None:
    text = (ROOT / page).read_text()
    numbers = [n for doc in page_jsons(text, page) for n in blocks.json_numbers(doc)]
    loose = [f for f in blocks.figures(text) + blocks.measured_tables(text)
             if (page, f.text) not in ALLOWED and not blocks.matches(f, numbers)]
    assert not loose, (f"{page}: figures outside generated blocks, in no JSON the page "
                       "shows:\n" + "\n".join(map(str, loose)))


def test_every_json_a_doc_shows_was_recorded_on_a_quiet_machine() -> None:
    for name in doc_figures.SOURCES:
        path = doc_figures.json_path(name)
        if path.exists():
            doc = json.loads(path.read_text())
            assert "trust" in doc and doc["loaded"] is False, (
                f"{path.name}: not recorded on a quiet machine (load average at the start "
                "over 1, or no record); rerun its benchmark on a quiet machine")


def test_every_evidence_json_a_doc_links_was_recorded_on_a_quiet_machine() -> None:
    for page in PAGES:
        here = (ROOT / page).parent
        for link in _evidence_links((ROOT / page).read_text()):
            path = (here / link).resolve()
            assert path.is_file(), f"{page} links {link}, which does not exist"
            doc = json.loads(path.read_text())
            # evidence scripts record it at the top; a benchmark's own JSON under "trust"
            load = doc.get("load_average_1m_at_start", doc.get(
                "load_average_at_start", doc.get("trust", {}).get("load_average_1m")))
            assert load is not None and load < 1, (
                f"{page} links {link}: its load average at the start is {load}, not under "
                "1; rerun it on a quiet machine")


def test_docs_img_holds_only_what_a_doc_shows() -> None:
    shown: set[str] = set()
    for page in PAGES:
        text = (ROOT / page).read_text()
        for name, view, _ in blocks.blocks(text):
            shown.add(f"{name}.json")
            if view == "chart":
                shown.add(f"{name}.png")
        shown.update(p.split("/")[-1] for p in _image_links(text))
    present = {p.name for p in doc_figures.IMG.glob("*") if p.suffix in (".json", ".png")}
    assert present <= shown, f"in docs/img but shown by no doc: {sorted(present - shown)}"


def test_every_allowed_figure_is_still_there() -> None:
    for (page, figure), _ in ALLOWED.items():
        found = [f.text for f in blocks.figures((ROOT / page).read_text())]
        assert figure in found, f"ALLOWED lists {figure!r} for {page}, which no longer has it"


def _image_links(text: str) -> list[str]:
    import re

    # a picture, or the JSON a picture is drawn from when the page links it
    return re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text) + re.findall(
        r"\]\((img/[^)]+\.json)\)", text
    )


# -- the scanner and the generator themselves ---------------------------------------------

PROSE = """s3kv moves 1 MiB blocks at 254 MiB/s up, 2 MiB objects in 0.83 s,
loads at 0.95-1.38x the obj tier's speed, with about 10% less CPU; 12 blocks, 64 KiB.
```sh
bench --delay-ms 15   # 15 ms in code is a command
```
<!-- bench:prompt-load:loads -->
| link | s3kv s |
|---|--:|
| rgw | 0.41 |
<!-- /bench -->
| how | median s |
|---|--:|
| recompute | 2.03 |
"""


def test_the_scanner_finds_measurements_and_only_them() -> None:
    found = [f.text for f in blocks.figures(PROSE)]
    assert found == ["254 MiB/s", "0.83 s", "0.95-1.38x", "10%"]
    assert [f.text for f in blocks.measured_tables(PROSE)] == ["2.03"]


def test_a_figure_counts_as_sourced_when_the_json_holds_it_at_its_precision() -> None:
    (speed,) = [f for f in blocks.figures(PROSE) if f.text == "254 MiB/s"]
    assert blocks.matches(speed, [253.7, 1.0])
    assert not blocks.matches(speed, [252.0])
    (ratio,) = [f for f in blocks.figures(PROSE) if f.text.endswith("x")]
    assert blocks.matches(ratio, [0.951, 1.3849])
    assert not blocks.matches(ratio, [0.951])


def test_a_block_renders_its_json_once_it_exists(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doc_figures, "IMG", tmp_path)
    page = tmp_path / "page.md"
    page.write_text("A\n<!-- bench:prompt-load:loads-8192 -->\nstale\n<!-- /bench -->\nB\n")
    assert doc_figures.regenerate(page) == (
        "A\n<!-- bench:prompt-load:loads-8192 -->\n"
        + doc_figures.placeholder("prompt-load", "loads-8192") + "\n<!-- /bench -->\nB\n")
    (tmp_path / "prompt-load.json").write_text(json.dumps(bench_fixtures.prompt_load()))
    table = doc_figures.regenerate(page)
    assert "| rgw-http | 8,192 | 2 MiB (16 tok) | 1.00 (0.900-1.20) | 2.00 (1.80-2.40) | " \
           "2.00x | 0.800 (0.720-0.960) | 1.25x | 0.100 |" in table
    assert "| aws-like | 8,192 | 32 MiB (256 tok) |" in table
    assert "3,072" not in table  # loads-8192 shows one prompt length
    assert "†" not in table


def test_a_block_marks_rounds_that_disagree_and_a_loaded_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doc_figures, "IMG", tmp_path)
    doc = bench_fixtures.prompt_load(loaded=True)
    doc["rows"][0].update(load_s_max=1.5, disagree=["load_s"])  # rgw-http 3,072 2 MiB s3kv
    (tmp_path / "prompt-load.json").write_text(json.dumps(doc))
    page = tmp_path / "page.md"
    page.write_text("<!-- bench:prompt-load:loads -->\n<!-- /bench -->\n")
    table = doc_figures.regenerate(page)
    assert "1.00 (0.900-1.50)†" in table
    assert "Loaded machine: load average 3.5 at the start." in table
    assert "† rounds disagree by more than 20%" in table


def test_an_unknown_block_is_named() -> None:
    with pytest.raises(KeyError, match="bench:nope:table: no such source"):
        doc_figures.block("nope", "table", ROOT / "README.md")
    with pytest.raises(KeyError, match="no such view"):
        doc_figures.block("ttft", "nope", ROOT / "README.md")
