"""`anekit generate` and `model.generate`'s interface: streaming, token-id prompts, errors."""

from __future__ import annotations

import json

import pytest

from anekit.cli import main
from anekit.errors import InputError
from tests.llm.conftest import PROMPT, TINY_GPT2, TINY_LLAMA


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_generate_streams_then_reports_speeds(capsys) -> None:
    code, out, err = cli(capsys, "generate", str(TINY_LLAMA), "--prompt", PROMPT, "-n", "8")
    assert code == 0
    assert out.startswith(PROMPT) and len(out) > len(PROMPT) + 1
    assert "measured on sim: prefill" in err and "decode" in err
    assert "estimated on m4" in err and "ms/token" in err


def test_generate_json_matches_the_python_api(capsys, tiny_gpt2) -> None:
    code, out, _ = cli(capsys, "generate", str(TINY_GPT2), "-p", PROMPT, "-n", "6", "--json",
                       "--target", "m1")  # fmt: skip
    assert code == 0
    data = json.loads(out)
    expected = tiny_gpt2.generate(PROMPT, max_new_tokens=6)
    assert data["token_ids"] == expected.token_ids and data["text"] == expected.text
    assert data["estimate"]["target"] == "m1"


def test_stream_yields_the_same_tokens_and_token_id_prompts(tiny_gpt2) -> None:
    whole = tiny_gpt2.generate(PROMPT, max_new_tokens=10)
    streamed = list(tiny_gpt2.generate(PROMPT, max_new_tokens=10, stream=True))
    assert [t.id for t in streamed] == whole.token_ids
    assert "".join(t.text for t in streamed) == whole.text
    by_ids = tiny_gpt2.generate(whole.prompt_ids, max_new_tokens=10)
    assert by_ids.token_ids == whole.token_ids
    fp32 = tiny_gpt2.generate(PROMPT, max_new_tokens=10, backend="sim-fp32")
    assert fp32.token_ids == whole.token_ids  # the fp32 twin of the same programs
    sampled = [tiny_gpt2.generate(PROMPT, max_new_tokens=10, temperature=1.0, top_p=0.9, seed=4)
               .token_ids for _ in range(2)]  # fmt: skip
    assert sampled[0] == sampled[1]


def test_bad_requests(capsys, tiny_gpt2) -> None:
    with pytest.raises(InputError, match="outside the vocabulary"):
        tiny_gpt2.generate([1, 99999], max_new_tokens=2)
    with pytest.raises(InputError, match="the context holds 256"):
        tiny_gpt2.generate([1] * 300, max_new_tokens=2)
    with pytest.raises(InputError, match="max_new_tokens"):
        tiny_gpt2.generate(PROMPT, max_new_tokens=0)
    code, _, err = cli(capsys, "generate", str(TINY_GPT2), "-p", "x", "--top-p", "2")
    assert code == 2 and "top_p must be in (0, 1]" in err and "Traceback" not in err
