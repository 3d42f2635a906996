"""mdsd dump on two tiny causal LMs built locally (no download), and reading dumps back."""

import io
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mdsd_cli.cli.app import app  # noqa: E402
from mdsd_cli.datasets import load_data  # noqa: E402
from mdsd_cli.datasets.dumps import shard_paths  # noqa: E402
from mdsd_cli.datasets.hf import dump  # noqa: E402
from mdsd_cli.errors import DataFileError, InputError  # noqa: E402

from .hf_models import build_model  # noqa: E402

runner = CliRunner()
PROMPTS = ["the draft model", "a lossless verifier keeps", "with multiple drafts", "the target model verifies",
           "speculative decoding"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    target = build_model(root / "target", seed=0, layers=2, hidden=64)
    draft = build_model(root / "draft", seed=1, layers=1, hidden=32)
    other = build_model(root / "other", seed=2, layers=1, hidden=32, extra_words=("zebra", "quokka"))
    prompts = root / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    scored = root / "scored.jsonl"
    scored.write_text("\n".join(json.dumps({"id": 10 + i, "prompt": p, "reference": "the target model verifies them"})
                                for i, p in enumerate(PROMPTS[:3])) + "\n")
    return {"target": target, "draft": draft, "other": other, "prompts": prompts, "scored": scored}


def _dump(models, out, **kw):
    args = dict(target=str(models["target"]), draft=str(models["draft"]), prompts_path=models["prompts"], out=out,
                max_new_tokens=6, batch_size=2, store_dtype="float32")
    args.update(kw)
    return dump(**args)


def _model_logits(path, ids):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, -1].numpy()


def test_generate_dump_reproduces_the_models_own_logits(models, tmp_path):
    from transformers import AutoTokenizer

    summary = _dump(models, tmp_path / "d")
    assert summary.prompts_done == len(PROMPTS) and summary.rows_written > 0
    pairs = load_data(tmp_path / "d")
    labels = pairs.labels
    assert pairs.num_pairs == summary.rows_written and pairs.vocab_size == summary.vocab_size
    tok = AutoTokenizer.from_pretrained(models["target"])
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["mode"] == "generate" and manifest["vocab_size"] == len(tok) and manifest["seed"] == 0
    for row in range(pairs.num_pairs):
        pid, pos = int(labels["prompt_id"][row]), int(labels["position"][row])
        previous = labels["token"][(labels["prompt_id"] == pid) & (labels["position"] < pos)]
        context = tok(PROMPTS[pid])["input_ids"] + [int(t) for t in previous]
        assert labels["context_length"][row] == len(context)
        np.testing.assert_allclose(pairs.target_logits[row], _model_logits(models["target"], context), atol=2e-4)
        np.testing.assert_allclose(pairs.draft_logits[row], _model_logits(models["draft"], context), atol=2e-4)


def test_same_seed_same_dump_other_seed_other_tokens(models, tmp_path):
    _dump(models, tmp_path / "a", seed=3)
    _dump(models, tmp_path / "b", seed=3, batch_size=3)  # batching does not change a prompt's stream
    _dump(models, tmp_path / "c", seed=4)
    a, b, c = (load_data(tmp_path / x) for x in "abc")
    np.testing.assert_array_equal(a.labels["token"], b.labels["token"])
    np.testing.assert_allclose(a.target_logits, b.target_logits, atol=2e-5)
    assert a.labels["token"].tolist() != c.labels["token"].tolist()


def test_score_mode_teacher_forces_the_reference(models, tmp_path):
    from transformers import AutoTokenizer

    _dump(models, tmp_path / "s", mode="score", prompts_path=models["scored"])
    pairs = load_data(tmp_path / "s")
    tok = AutoTokenizer.from_pretrained(models["target"])
    reference = tok("the target model verifies them", add_special_tokens=False)["input_ids"]
    assert sorted(set(pairs.labels["prompt_id"].tolist())) == [10, 11, 12]
    first = pairs.labels["prompt_id"] == 10
    assert pairs.labels["token"][first].tolist() == reference
    context = tok(PROMPTS[0])["input_ids"] + reference[:2]
    row = np.flatnonzero(first)[2]
    np.testing.assert_allclose(pairs.target_logits[row], _model_logits(models["target"], context), atol=2e-4)


def test_interrupted_dump_resumes_to_the_same_result(models, tmp_path):
    full = tmp_path / "full"
    _dump(models, full, rows_per_shard=1)
    part = tmp_path / "part"
    seen = {"tokens": 0}

    def stop_after_some(event, **info):
        if event == "tokens":
            seen["tokens"] += info["count"]
            if seen["tokens"] >= 7:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _dump(models, part, rows_per_shard=1, batch_size=1, progress=stop_after_some)
    kept = len(shard_paths(part))
    assert 0 < kept < len(PROMPTS)
    summary = _dump(models, part, rows_per_shard=1, batch_size=1)
    assert summary.prompts_skipped == kept and summary.prompts_done == len(PROMPTS) - kept
    a, b = load_data(full), load_data(part)
    for key in ("prompt_id", "position", "token"):
        np.testing.assert_array_equal(a.labels[key], b.labels[key])
    np.testing.assert_allclose(a.target_logits, b.target_logits, atol=2e-5)


def test_mismatched_tokenizers_are_refused_unless_aligned(models, tmp_path):
    with pytest.raises(InputError, match="allow-vocab-mismatch|allow_vocab_mismatch"):
        _dump(models, tmp_path / "m", draft=str(models["other"]))
    notes = []
    summary = _dump(models, tmp_path / "m2", draft=str(models["other"]), allow_vocab_mismatch=True,
                    notify=notes.append)
    assert summary.aligned and notes and "shared prefix" in notes[0]
    assert load_data(tmp_path / "m2").vocab_size == summary.vocab_size


def test_resume_with_other_settings_is_refused(models, tmp_path):
    _dump(models, tmp_path / "r", max_new_tokens=3)
    with pytest.raises(DataFileError, match="different settings"):
        _dump(models, tmp_path / "r", max_new_tokens=4)


def test_bad_prompt_files(models, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json}\n')
    with pytest.raises(DataFileError, match="line 2"):
        _dump(models, tmp_path / "x", prompts_path=bad)
    with pytest.raises(DataFileError, match="reference"):
        _dump(models, tmp_path / "x", prompts_path=models["prompts"], mode="score")
    with pytest.raises(DataFileError, match="cannot load model"):
        _dump(models, tmp_path / "x", target=str(tmp_path / "no-such-model"))


def test_cli_dump_then_bound_and_verify(models, tmp_path):
    out = tmp_path / "cli"
    result = runner.invoke(app, ["dump", "--target", str(models["target"]), "--draft", str(models["draft"]),
                                 "--prompts", str(models["prompts"]), "--out", str(out), "--max-new-tokens", "4",
                                 "--store-dtype", "float16"])
    assert result.exit_code == 0, result.stderr
    assert "dumped" in result.stderr and result.stdout == ""
    bound = runner.invoke(app, ["bound", "--data", str(out), "-s", "iid", "-s", "wor", "-n", "2", "-q"])
    assert bound.exit_code == 0, bound.stderr
    df = pd.read_csv(io.StringIO(bound.stdout))
    assert {"prompt_id", "position", "token"} <= set(df.columns) and df.alpha_star.between(0, 1).all()
    verify = runner.invoke(app, ["verify", "--data", str(out), "--verifier", "rrs", "--verifier", "greedy", "-q"])
    assert verify.exit_code == 0, verify.stderr
    described = json.loads(runner.invoke(app, ["datasets", str(out)]).stdout)
    assert described["kind"] == "dump" and described["prompts"] == len(PROMPTS)
    again = runner.invoke(app, ["dump", "--target", str(models["target"]), "--draft", str(models["draft"]),
                                "--prompts", str(models["prompts"]), "--out", str(out), "--max-new-tokens", "4",
                                "--store-dtype", "float16"])
    assert again.exit_code == 0 and f"({len(PROMPTS)} already done)" in again.stderr


# --- a larger target vocabulary, failures that leave nothing behind, incomplete dumps, model names ---------------

def test_a_larger_target_vocabulary_is_aligned_and_the_draft_reads_its_own_token_ids(models, tmp_path):
    from transformers import AutoTokenizer

    # "other" knows two more words: from id 36 on the two vocabularies differ ("verifies" is 46 in the target,
    # 45 in the draft, whose embedding has 46 rows), and the prompts use such tokens
    notes = []
    summary = _dump(models, tmp_path / "big", target=str(models["other"]), allow_vocab_mismatch=True,
                    notify=notes.append)
    assert summary.aligned and "its own token ids" in notes[0]
    pairs = load_data(tmp_path / "big")
    tok_t = AutoTokenizer.from_pretrained(models["other"])
    tok_d = AutoTokenizer.from_pretrained(models["draft"])
    V, labels = pairs.vocab_size, pairs.labels
    assert V == 36 and (labels["token"] < V).all()
    for row in range(pairs.num_pairs):
        pid, pos = int(labels["prompt_id"][row]), int(labels["position"][row])
        previous = labels["token"][(labels["prompt_id"] == pid) & (labels["position"] < pos)]
        context = tok_t(PROMPTS[pid])["input_ids"] + [int(t) for t in previous]
        in_draft = tok_d.convert_tokens_to_ids(tok_t.convert_ids_to_tokens(context))
        np.testing.assert_allclose(pairs.target_logits[row], _model_logits(models["other"], context)[:V], atol=2e-4)
        np.testing.assert_allclose(pairs.draft_logits[row], _model_logits(models["draft"], in_draft)[:V], atol=2e-4)


def test_a_prompt_the_draft_cannot_read_is_refused_before_anything_is_written(models, tmp_path):
    prompts = tmp_path / "zebra.txt"
    prompts.write_text("the draft model\nthe zebra model\n")
    with pytest.raises(InputError, match=r"prompt 1 holds the token 'zebra'.*does not have"):
        _dump(models, tmp_path / "new" / "dump", target=str(models["other"]), allow_vocab_mismatch=True,
              prompts_path=prompts)
    assert not (tmp_path / "new").exists()


def test_a_first_run_that_fails_leaves_no_directory_and_missing_parents_are_created(models, tmp_path):
    def fail(event, **info):
        if event == "tokens":
            raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError):
        _dump(models, tmp_path / "a" / "b", progress=fail)
    assert not (tmp_path / "a").exists()
    (tmp_path / "empty").mkdir()  # a directory that was there before stays, empty
    with pytest.raises(RuntimeError):
        _dump(models, tmp_path / "empty", progress=fail)
    assert list((tmp_path / "empty").iterdir()) == []
    summary = _dump(models, tmp_path / "a" / "b", max_new_tokens=2)  # missing parents are created
    assert summary.prompts_done == len(PROMPTS) and (tmp_path / "a" / "b" / "manifest.json").exists()


def test_an_interrupted_dump_is_marked_and_warned_about(models, tmp_path):
    part = tmp_path / "part"
    seen = {"tokens": 0}

    def stop_after_some(event, **info):
        if event == "tokens":
            seen["tokens"] += info["count"]
            if seen["tokens"] >= 7:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _dump(models, part, rows_per_shard=1, batch_size=1, progress=stop_after_some)
    kept = len(set(load_data(part).labels["prompt_id"].tolist()))
    described = json.loads(runner.invoke(app, ["datasets", str(part)]).stdout)
    assert described["complete"] is False and described["prompts"] == kept < described["prompt_count"] == 5
    bound = runner.invoke(app, ["bound", "--data", str(part), "-q"])
    assert bound.exit_code == 0 and f"incomplete dump: {kept} of 5 prompts stored" in bound.stderr
    assert "incomplete" not in bound.stdout
    swept = runner.invoke(app, ["sweep", "--data", str(part), "-s", "iid", "--out", str(tmp_path / "sw"), "-q"])
    assert swept.exit_code == 0 and f"incomplete dump: {kept} of 5 prompts stored" in swept.stderr
    _dump(models, part, rows_per_shard=1, batch_size=1)  # resumed to the end
    assert json.loads(runner.invoke(app, ["datasets", str(part)]).stdout)["complete"] is True
    assert "incomplete" not in runner.invoke(app, ["bound", "--data", str(part), "-q"]).stderr


def test_cli_dump_creates_missing_parents(models, tmp_path):
    out = tmp_path / "dumps" / "x"
    result = runner.invoke(app, ["dump", "--target", str(models["target"]), "--draft", str(models["draft"]),
                                 "--prompts", str(models["prompts"]), "--out", str(out), "--max-new-tokens", "2"])
    assert result.exit_code == 0, result.stderr
    assert load_data(out).num_pairs == 2 * len(PROMPTS)


def connections(monkeypatch) -> list:
    """Every network connection a test's code attempts, by its address (the attempt still happens).

    "Fails at once" is checked by what the code tries, not by a wall time a busy machine would break.
    """
    import socket

    tried: list = []
    connect = socket.socket.connect

    def counting(self, address):
        tried.append(address)
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", counting)
    return tried


def test_a_missing_local_model_fails_at_once(models, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    tried = connections(monkeypatch)
    result = runner.invoke(app, ["dump", "--target", "models/nothere", "--draft", str(models["draft"]),
                                 "--prompts", str(models["prompts"]), "--out", "d"])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "cannot load model 'models/nothere': no such directory" in result.stderr
    assert tried == [] and not (tmp_path / "d").exists()  # a local path: the network is never tried


def test_an_unreachable_hub_is_one_line_naming_hf_hub_offline(models, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: as without a network
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-cache"))
    tried = connections(monkeypatch)
    result = runner.invoke(app, ["dump", "--target", "nobody/nothere", "--draft", str(models["draft"]),
                                 "--prompts", str(models["prompts"]), "--out", "d"])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "127.0.0.1 cannot be reached" in result.stderr and "HF_HUB_OFFLINE=1" in result.stderr
    assert len(tried) == 1  # one probe of the endpoint, no retries against it
