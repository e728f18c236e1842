"""Make the tiny Llama the real-engine tier serves: random weights, no download.

Run with the engines venv's Python (it has torch, transformers and tokenizers)::

    .venv-engines/bin/python tests/engines/tiny_model.py OUT_DIR

``LlamaForCausalLM(LlamaConfig(...))``: 2 layers, hidden size 128, 4 heads of 32 (the
smallest head size vLLM's CPU attention takes), a vocabulary of 2,000 from a byte-level BPE
trained with ``tokenizers`` on Python's own standard library sources, and a chat template in
``tokenizer_config.json`` with ``<think>``/``</think>`` tokens. Its layers keep their random
weights; the embeddings and the output head are wired so that greedy decoding (and sampling:
the margins are about a hundred logits) after the template's ``<|assistant|>`` reads
``<think>`` REASONING ``</think>`` ANSWER ``</s>``: every answer is known in advance, and it
ends with the end-of-sequence token long before any budget. The model checks that on itself
with transformers before it is saved.
"""

from __future__ import annotations

import argparse
import json
import sysconfig
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 2000
HIDDEN = 128
HEADS = 4
LAYERS = 2
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
ROLES = ("<|system|>", "<|user|>", "<|assistant|>")
THINK = ("<think>", "</think>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>"
    "{{ message['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
#: The output head's logit for the wired next token, and the end-of-sequence bias.
WIRED_SCALE = 2.0
EOS_BIAS = 80.0


def corpus() -> list[str]:
    """Python's standard library sources: local, the same on every machine of one Python."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p for sub in ("json", "email", "asyncio", "logging") for p in (lib / sub).glob("*.py")
    )
    return [str(p) for p in files]


def train_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    special = [BOS, EOS, PAD, *ROLES]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(THINK),
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train(corpus(), trainer)
    # Not special: they stay in the text, where a reasoning parser looks for them.
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in THINK])
    return tokenizer


def chain(tokenizer: Tokenizer, reasoning: str, answer: str) -> list[int]:
    """The token ids greedy decoding must follow, from ``<|assistant|>`` to ``</s>``."""
    ids = [tokenizer.token_to_id(ROLES[2]), tokenizer.token_to_id(THINK[0])]
    ids += tokenizer.encode(reasoning).ids
    ids.append(tokenizer.token_to_id(THINK[1]))
    ids += tokenizer.encode(answer).ids
    ids.append(tokenizer.token_to_id(EOS))
    if len(set(ids)) != len(ids):
        raise SystemExit(f"the chain repeats a token: {tokenizer.decode(ids)!r}; pick other words")
    return ids


def build(out: Path, reasoning: str, answer: str) -> dict[str, object]:
    torch.manual_seed(0)
    tokenizer = train_tokenizer()
    vocab = tokenizer.get_vocab_size()
    if vocab != VOCAB:
        raise SystemExit(f"the tokenizer has {vocab} tokens, not {VOCAB}: train on more text")
    path = chain(tokenizer, reasoning, answer)
    eos = tokenizer.token_to_id(EOS)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.token_to_id(BOS),
        eos_token_id=eos,
        pad_token_id=tokenizer.token_to_id(PAD),
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        # Embeddings of norm ~sqrt(HIDDEN) (the layers' random outputs are small beside them),
        # channel 0 a constant that carries the end-of-sequence bias.
        embed = torch.randn(VOCAB, HIDDEN)
        embed[:, 0] = 1.0
        head = torch.zeros(VOCAB, HIDDEN)
        for source, target in zip(path, [*path[1:], eos], strict=True):
            head[target, 1:] += WIRED_SCALE * embed[source, 1:]
        head[eos, 0] = EOS_BIAS
        model.model.embed_tokens.weight.copy_(embed)
        model.lm_head.weight.copy_(head)
        prompt = torch.tensor([[tokenizer.token_to_id(BOS), *path[:1]]])
        generated = model.generate(
            prompt,
            max_new_tokens=len(path) + 4,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=config.pad_token_id,
        )[0, 1:].tolist()
    if generated[: len(path)] != path:
        raise SystemExit(
            f"the wired model does not follow its chain: {tokenizer.decode(generated)!r}"
        )
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out)  # the dtype vLLM's CPU backend runs
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=2048,
    )
    fast.save_pretrained(out)
    # The chat template in tokenizer_config.json, where most published models keep it
    # (transformers 5 would write chat_template.jinja).
    config_path = out / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text(encoding="utf-8"))
    tokenizer_config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")
    (out / "chat_template.jinja").unlink(missing_ok=True)
    facts = {
        "reasoning": reasoning,
        "answer": answer,
        "chain": tokenizer.decode(path[1:], skip_special_tokens=False),
        "vocab_size": VOCAB,
    }
    (out / "kyai-tiny.json").write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--reasoning", default="Let me see.")
    parser.add_argument("--answer", default="Paris")
    args = parser.parse_args()
    print(json.dumps(build(args.out, args.reasoning, args.answer)))


if __name__ == "__main__":
    main()
