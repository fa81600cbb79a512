"""Writes a few MB of mixed text for tokenizer benchmarks (deterministic): English prose-like
sentences, code, numbers, accented and CJK text, emoji and whitespace runs.
Usage: python3 bench/make_text.py OUT_FILE [MEGABYTES]"""
import random
import sys

WORDS = ("the of and to in is was that for it with as his on be at by had are but from or have an they "
         "which one you were all her she there would their we him been has when who will no more if out so "
         "time people story little girl named Lily loved play outside park tokenizer server model").split()
PIECES = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }\n",
          "café résumé naïve Ångström ", "日本語のテキスト、中文文本。", "한국어 문장입니다. ", "emoji 😀👍🏽🚀 ",
          "3.14159 2718 1e-9 0xDEADBEEF ", "    \t\n\n", "<div class=\"x\">Hello</div>\n", "It's we'll they've I'd "]


def main():
    out = sys.argv[1]
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 4
    rng = random.Random(0)
    parts, size = [], 0
    while size < mb * 1e6:
        if rng.random() < 0.8:
            s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20))).capitalize() + ". "
        else:
            s = rng.choice(PIECES)
        parts.append(s)
        size += len(s.encode())
    with open(out, "w", encoding="utf-8") as f:
        f.write("".join(parts))


if __name__ == "__main__":
    main()
