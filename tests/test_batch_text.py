"""python -m app.batch --task query|caption: records equal Engine.query/caption, answer formats,
resume rules, and the CLI's one-line errors before any image is read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from app.batch import main
from app.common import open_engine
from engine import Regex
from engine.__main__ import main as cli_main
from engine.model.image import load_image
from tests.test_batch import make_folder, read_jsonl

QUESTION = "Is there a red circle?"
SCHEMA = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}, "count": {"enum": [0, 1, 2]}},
          "required": ["colour", "count"]}


def run(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> tuple[Path, list[str]]:
    src = tmp_path_factory.mktemp("text") / "photos"
    return src, make_folder(src, 5)  # 5 images (one in sub/) + corrupt.JPG + empty.png


@pytest.fixture(scope="module")
def engine(tiny_ckpt):
    engine = open_engine(tiny_ckpt, max_batch=16).start()
    yield engine
    engine.close()


def results(out: Path) -> dict[str, dict]:
    return {r["path"]: r for r in read_jsonl(out / "results.jsonl")}


@pytest.mark.parametrize("options, call", [
    (["--task", "query", "--question", QUESTION, "--choices", "yes,no"],
     lambda e, im: e.query(im, QUESTION, answer=["yes", "no"])),
    (["--task", "query", "--question", "How many circles?", "--regex", "[0-9]{1,2}"],
     lambda e, im: e.query(im, "How many circles?", answer=Regex("[0-9]{1,2}"))),
    (["--task", "query", "--question", "Describe the shape.", "--schema", json.dumps(SCHEMA)],
     lambda e, im: e.query(im, "Describe the shape.", answer=SCHEMA)),
    (["--task", "query", "--question", "What is it?", "--max-tokens", "6"],
     lambda e, im: e.query(im, "What is it?", max_tokens=6)),
    (["--task", "caption", "--length", "short", "--max-tokens", "6"],
     lambda e, im: e.caption(im, "short", max_tokens=6)),
])
def test_records_equal_the_engine(tmp_path, folder, tiny_ckpt, engine, capsys, options, call):
    src, names = folder
    out = tmp_path / "out"
    rc, text, _ = run(capsys, src, *options, "--recursive", "--weights", tiny_ckpt, "--out", out, "--quiet")
    assert rc == 1  # the two unreadable files are failures
    assert sorted(p.name for p in out.iterdir()) == ["results.jsonl"]  # no COCO for answers
    records = results(out)
    assert sorted(records) == names
    task = options[1]
    for rel, rec in records.items():
        if rel in ("corrupt.JPG", "empty.png"):
            assert "error" in rec and "result" not in rec
            continue
        assert rec["result"] == call(engine, load_image(src / rel)), rel
        assert rec["task"] == task and rec["max_tokens"] == (6 if "--max-tokens" in options else None)
        key = "answer" if task == "query" else "caption"
        answer = rec["result"][key]
        assert rec[key] == answer  # at the top level of the record too
        if "--choices" in options:
            assert answer in ("yes", "no") and rec["answer_format"] == {"choices": ["yes", "no"]}
        elif "--regex" in options:
            assert re.fullmatch("[0-9]{1,2}", answer) and rec["answer_format"] == {"regex": "[0-9]{1,2}"}
        elif "--schema" in options:  # the parsed JSON value, valid under the schema
            jsonschema.validate(answer, SCHEMA)
            assert rec["answer_format"] == {"json_schema": SCHEMA}
        elif task == "caption":
            assert isinstance(answer, str) and rec["length"] == "short" and "question" not in rec
        else:
            assert isinstance(answer, str) and rec["answer_format"] is None and rec["question"] == "What is it?"
    summary = "answers: 5 (query" if task == "query" else "captions: 5 (caption short)"
    assert summary in text and "failures: 2 (2 new)" in text


def test_resume_with_the_same_settings_and_refusal_of_others(tmp_path, folder, tiny_ckpt, capsys):
    src, names = folder
    out = tmp_path / "out"
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    query = [src, "--recursive", "--task", "query", "--question", QUESTION, "--schema", schema_file,
             "--weights", tiny_ckpt, "--out", out, "--quiet"]
    rc, text, _ = run(capsys, *query, "--limit", "3")
    assert rc == 1 and "(3 new, 0 already recorded, 4 left for a later run)" in text
    # The same settings, the schema now given inline: the same format, so the run resumes.
    inline = [a if a != schema_file else json.dumps(SCHEMA) for a in query]
    rc, text, _ = run(capsys, *inline)
    assert rc == 1 and "(4 new, 3 already recorded)" in text
    first = (out / "results.jsonl").read_bytes()
    lines = read_jsonl(out / "results.jsonl")
    assert sorted(r["path"] for r in lines) == names  # each image once
    assert all(isinstance(r["result"]["answer"], dict) for r in lines if "result" in r)
    rc, text, _ = run(capsys, *query)
    assert rc == 1 and "(0 new, 7 already recorded)" in text

    # Other settings would mix answers to two questions in one file: refused, nothing written.
    schema_file.write_text(json.dumps({**SCHEMA, "required": ["colour"]}))  # the schema file was edited
    others = [(query, "answer_format"),
              ([a if a != QUESTION else "Is there a blue star?" for a in inline], "question"),
              ([*inline, "--max-tokens", "40"], "max_tokens"),
              ([{"--schema": "--choices", json.dumps(SCHEMA): "yes,no"}.get(a, a) if isinstance(a, str) else a
                for a in inline], "answer_format"),
              ([src, "--task", "caption", "--weights", tiny_ckpt, "--out", out, "--quiet"], "task"),
              ([src, "--task", "detect", "--object", "red circle", "--weights", tiny_ckpt, "--out", out, "--quiet"],
               "results for query")]
    for argv, named in others:
        rc, _, err = run(capsys, *argv)
        assert rc == 2 and err.startswith("error: ") and named in err and "choose another --out" in err, argv
        assert err.count("\n") == 1
        assert (out / "results.jsonl").read_bytes() == first

    # Captions resume the same way, and a caption of another length is refused.
    cap = tmp_path / "cap"
    caption = [src, "--recursive", "--task", "caption", "--max-tokens", "4", "--weights", tiny_ckpt, "--out", cap,
               "--quiet"]
    assert run(capsys, *caption, "--limit", "2")[0] == 1
    rc, text, _ = run(capsys, *caption)
    assert rc == 1 and "(5 new, 2 already recorded)" in text
    assert all(r["length"] == "normal" for r in read_jsonl(cap / "results.jsonl"))
    rc, _, err = run(capsys, *caption, "--length", "short")
    assert rc == 2 and 'length "normal" there, "short" now' in err


def test_bad_inputs_fail_like_the_cli_before_any_image(tmp_path, folder, tiny_ckpt, capsys):
    src, _ = folder
    image = src / "img000.png"
    not_utf8 = tmp_path / "latin1.json"
    not_utf8.write_bytes(b'{"description": "caf\xe9"}')
    cases = [["   "], ["Is it?", "--schema", str(tmp_path / "missing.json")], ["Is it?", "--schema", str(not_utf8)],
             ["Is it?", "--schema", '{"type": "bogus"}'], ["Is it?", "--schema", '{"type": "integer", "minimum": 0}'],
             ["Is it?", "--choices", ","]]
    for case in cases:
        question, rest = case[0], case[1:]
        assert cli_main(["query", str(image), question, *rest, "--weights", str(tiny_ckpt)]) == 2
        cli_err = capsys.readouterr().err.splitlines()[-1]
        out = tmp_path / "never"
        rc, text, err = run(capsys, src, "--task", "query", "--question", question, *rest, "--weights", tiny_ckpt,
                            "--out", out, "--quiet")
        assert rc == 2 and err == cli_err + "\n" and text == "", case
        assert not out.exists()  # refused before any image was read or any output made

    # What only the model's vocabulary or rows can tell (a regex that does not compile, more tokens
    # than a row holds) is refused once the model is loaded, before any image is read: no record.
    for question, rest in (("Is it?", ["--regex", "(unclosed"]), ("Is it?", ["--max-tokens", "100000"])):
        assert cli_main(["query", str(image), question, *rest, "--weights", str(tiny_ckpt)]) == 2
        cli_err = capsys.readouterr().err.splitlines()[-1]
        assert cli_err.startswith("error: ")
        rc, text, err = run(capsys, src, "--task", "query", "--question", question, *rest, "--weights", tiny_ckpt,
                            "--out", tmp_path / "late", "--quiet")
        assert rc == 2 and err.splitlines()[-1] == cli_err and text == "", rest
        assert (tmp_path / "late" / "results.jsonl").read_bytes() == b""


@pytest.mark.parametrize("extra, says", [
    (["--format", "coco"], "--format writes boxes and points"), (["--format", "coco,yolo"], "--format"),
    (["--draw"], "--draw and --min-score"), (["--min-score", "0.5"], "--draw and --min-score"),
    (["--object", "cat"], "--object/--objects-file is not for --task query"),
    (["--max-objects", "5"], "--max-objects is not for --task query"),
    (["--length", "short"], "--length is not for --task query"), (["--max-tokens", "0"], "--max-tokens must be"),
])
def test_query_refuses_exports_and_object_options(tmp_path, folder, capsys, extra, says):
    src, _ = folder
    with pytest.raises(SystemExit) as info:
        main([str(src), "--task", "query", "--question", QUESTION, *extra, "--out", str(tmp_path / "o")])
    assert info.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_options_of_other_tasks_are_refused(tmp_path, folder, capsys):
    src, _ = folder
    for argv, says in ([["--task", "query"], "--task query needs the question"],
                       [["--task", "caption", "--question", "Why?"], "--question is not for --task caption"],
                       [["--task", "caption", "--format", "yolo"], "--format writes boxes and points"],
                       [["--task", "detect", "--object", "cat", "--choices", "a,b"], "--choices is for --task query/caption"]):
        with pytest.raises(SystemExit) as info:
            main([str(src), *argv, "--out", str(tmp_path / "o")])
        assert info.value.code == 2 and says in capsys.readouterr().err, argv
