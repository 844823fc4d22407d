#!/usr/bin/env python3
"""Writes core/data/unicode_tables.inc: the character classes and mappings actorpipe's BERT basic
tokenizer (core/data/wordpiece.cpp) needs to tokenize as Hugging Face's Python BertTokenizer
(BasicTokenizer, google-research/bert's rules) does with this Python's unicodedata.

    python3 scripts/gen_unicode_tables.py            # rewrites core/data/unicode_tables.inc
    python3 scripts/gen_unicode_tables.py --check    # exit 1 when the file differs

The generated file records the Python and Unicode versions it was made with (the committed one:
Python 3.11.7, unicodedata.unidata_version 14.0.0). Another Unicode version gives other tables
(newly assigned characters stop being category Cn, which BERT drops as control); the build does
not run this script.

Tables (code-point ranges are inclusive and sorted, adjacent ranges merged):
  punctuation_ranges   BERT's _is_punctuation: ASCII 33-47, 58-64, 91-96, 123-126, or category P*
  whitespace_ranges    BERT's _is_whitespace (space, \\t, \\n, \\r, Zs) plus the characters Python's
                       str.split() also splits on that cleaning leaves (U+2028, U+2029)
  control_ranges       BERT's _is_control: category C* (Cc, Cf, Cs, Co, Cn) but \\t, \\n, \\r; plus
                       U+0000 and U+FFFD, which _clean_text drops too
  nonspacing_mark_ranges  category Mn (what _run_strip_accents drops after NFD)
  cjk_ranges           BERT's _is_chinese_char blocks, as listed there
  case_ignorable_ranges, cased_ranges  Python's Case_Ignorable and Cased (cased: only where not
                       case-ignorable), for str.lower()'s final sigma
  combining_class_ranges  canonical combining class (non-zero), for NFC / NFD ordering
  lower_runs           str.lower() of one character, as runs first..last step `stride` mapping c to
                       c + delta; lower_multi: the characters that lower to more than one
  decompositions       one level of canonical decomposition (1 or 2 code points; Hangul syllables
                       are algorithmic, not listed) and whether the pair composes back in NFC
"""
import argparse
import os
import sys
import unicodedata as ud

N = 0x110000
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "core", "data", "unicode_tables.inc")


def cat(c):
    return ud.category(chr(c))


def ranges(pred):
    out, start = [], None
    for c in range(N):
        if pred(c):
            if start is None:
                start = c
        elif start is not None:
            out.append((start, c - 1))
            start = None
    if start is not None:
        out.append((start, N - 1))
    return out


def merge(rs):
    out = []
    for a, b in sorted(rs):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def is_punctuation(c):
    return 33 <= c <= 47 or 58 <= c <= 64 or 91 <= c <= 96 or 123 <= c <= 126 or cat(c).startswith("P")


def is_control(c):
    return c not in (9, 10, 13) and cat(c).startswith("C")


def is_bert_whitespace(c):
    return chr(c) in " \t\n\r" or cat(c) == "Zs"


def dropped(c):
    return c == 0 or c == 0xFFFD or is_control(c)


# Hugging Face's BasicTokenizer cleans (drops controls, whitespace -> ' '), then splits with
# str.split(), which also splits on what str.isspace() calls space: of that, cleaning leaves only
# U+2028 and U+2029 (U+001C-001F, U+0085, \v, \f are Cc and dropped first).
def is_whitespace(c):
    return is_bert_whitespace(c) or (chr(c).isspace() and not dropped(c))


# BERT's _is_chinese_char, verbatim.
CJK = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
       (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


# str.lower() turns U+03A3 into final sigma after a cased letter (case-ignorables skipped) that no
# cased letter follows. Python does not expose Cased / Case_Ignorable; read them off lower():
#   "A" + c + "Σ" ends in ς  iff  c is case-ignorable, or c is cased
#   "1" + c + "Σ" ends in ς  iff  c is not case-ignorable and c is cased
# Whether a case-ignorable character is cased never matters (it is skipped either way).
def final_sigma(s):
    return s.lower()[-1] == "\u03c2"


def case_ignorable(c):
    return final_sigma("A" + chr(c) + "\u03a3") and not final_sigma("1" + chr(c) + "\u03a3")


def cased(c):
    return final_sigma("1" + chr(c) + "\u03a3")


def lower_runs():
    singles = []
    multi = []
    for c in range(N):
        lo = chr(c).lower()
        if lo == chr(c):
            continue
        if len(lo) == 1:
            singles.append((c, ord(lo) - c))
        else:
            multi.append((c, [ord(x) for x in lo]))
    runs = []  # [first, last, delta, stride]
    for c, d in singles:
        if runs:
            r = runs[-1]
            if r[2] == d and r[0] == r[1] and c - r[1] in (1, 2):
                r[1], r[3] = c, c - r[1]
                continue
            if r[2] == d and r[0] != r[1] and c - r[1] == r[3]:
                r[1] = c
                continue
        runs.append([c, c, d, 1])
    return runs, multi


def decompositions():
    out = []
    for c in range(N):
        d = ud.decomposition(chr(c))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        assert len(parts) in (1, 2), hex(c)
        # A two-part decomposition composes back unless the character is a composition exclusion
        # (or a non-starter decomposition): exactly when NFC leaves it alone.
        composes = len(parts) == 2 and ud.normalize("NFC", chr(c)) == chr(c)
        out.append((c, parts[0], parts[1] if len(parts) == 2 else 0, composes))
    return out


def fmt_ranges(name, rs, comment):
    lines = [f"// {comment}", f"constexpr cp_range {name}[] = {{"]
    items = [f"{{0x{a:X}, 0x{b:X}}}" for a, b in rs]
    for i in range(0, len(items), 6):
        lines.append("    " + ", ".join(items[i:i + 6]) + ",")
    lines.append("};")
    return "\n".join(lines)


def rows(items, per_row):
    """Table initialiser lines: `per_row` items a line, indented, each line ending in a comma."""
    return ["    " + ", ".join(items[i:i + per_row]) + "," for i in range(0, len(items), per_row)]


def generate():
    ccc = []
    for c in range(N):
        k = ud.combining(chr(c))
        if k == 0:
            continue
        if ccc and ccc[-1][1] == c - 1 and ccc[-1][2] == k:
            ccc[-1][1] = c
        else:
            ccc.append([c, c, k])
    runs, multi = lower_runs()
    assert [c for c, _ in multi] == [0x130], multi  # only İ -> i + U+0307 (Python ignores locales)
    decs = decompositions()
    ignorable = ranges(case_ignorable)
    cased_only = ranges(lambda c: cased(c) and not case_ignorable(c))
    control = merge(ranges(is_control) + [(0, 0), (0xFFFD, 0xFFFD)])

    parts = [
        "// Generated by scripts/gen_unicode_tables.py: do not edit. Regenerate with",
        "//     python3 scripts/gen_unicode_tables.py",
        f"// Python {sys.version.split()[0]}, unicodedata.unidata_version {ud.unidata_version}.",
        "// Included by core/data/wordpiece.cpp inside its anonymous namespace, which defines cp_range,",
        "// ccc_range, lower_run, lower_multi_entry and decomposition. The script's header says what each",
        "// table holds.",
        f"#define ACTORPIPE_UNICODE_VERSION \"{ud.unidata_version}\"",
        "",
        fmt_ranges("punctuation_ranges", ranges(is_punctuation),
                   "BERT's _is_punctuation: ASCII 33-47, 58-64, 91-96, 123-126, or category P*."),
        "",
        fmt_ranges("whitespace_ranges", ranges(is_whitespace),
                   "BERT's _is_whitespace (space, \\t, \\n, \\r, Zs) plus U+2028 and U+2029, which Python's\n"
                   "// str.split() in Hugging Face's whitespace_tokenize splits on too."),
        "",
        fmt_ranges("control_ranges", control,
                   "What _clean_text drops: U+0000, U+FFFD and _is_control, category C* (Cc, Cf, Cs, Co, Cn)\n"
                   "// except \\t, \\n, \\r."),
        "",
        fmt_ranges("nonspacing_mark_ranges", ranges(lambda c: cat(c) == "Mn"),
                   "Category Mn: what _run_strip_accents drops after NFD."),
        "",
        fmt_ranges("cjk_ranges", merge(CJK), "BERT's _is_chinese_char, as listed there (merged where adjacent)."),
        "",
        fmt_ranges("case_ignorable_ranges", ignorable, "Case_Ignorable, as Python's str.lower() reads it for final sigma."),
        "",
        fmt_ranges("cased_ranges", cased_only, "Cased, where not case-ignorable, as str.lower() reads it for final sigma."),
        "",
        "// Canonical combining class (non-zero only): first, last, class.",
        "constexpr ccc_range combining_class_ranges[] = {",
    ]
    parts += rows([f"{{0x{a:X}, 0x{b:X}, {k}}}" for a, b, k in ccc], 5)
    parts += ["};", "",
              "// str.lower() of one character: first, last, delta, stride (first, first + stride, ... map to",
              "// c + delta). Final sigma is handled where it is used.",
              "constexpr lower_run lower_runs[] = {"]
    parts += rows([f"{{0x{a:X}, 0x{b:X}, {d}, {s}}}" for a, b, d, s in runs], 5)
    parts += ["};", "", "// str.lower() of the characters that lower to more than one.",
              "constexpr lower_multi_entry lower_multi[] = {"]
    for c, seq in multi:
        parts.append(f"    {{0x{c:X}, {{{', '.join(f'0x{x:X}' for x in seq)}}}}},")
    parts += ["};", "",
              "// One level of canonical decomposition: code point, first, second (0: a singleton), and whether",
              "// NFC composes first + second back into it. Hangul syllables are algorithmic.",
              "constexpr decomposition decompositions[] = {"]
    parts += rows([f"{{0x{c:X}, 0x{a:X}, 0x{b:X}, {int(k)}}}" for c, a, b, k in decs], 4)
    parts += ["};", ""]
    return "\n".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    text = generate()
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            same = f.read() == text
        print(f"{args.out}: {'up to date' if same else 'differs'}")
        return 0 if same else 1
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
