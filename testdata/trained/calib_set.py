#!/usr/bin/env python3
"""Write an in-domain calibration set for the trained test models (docs/results.md).

The models were trained on the Python 3.11 documentation (prepare_data.py). Their default
calibration is tq calibrate's 32 built-in prompts (tool calls, long documents, math), text the
models never saw. This script takes calibration text from the training documents instead:
every document except the held-out ones (data/heldout.json), in the order of
sha256("calib:" + relative path), up to PIECES pieces of 1,500 characters per document spread
evenly over it (documents shorter than one piece are skipped), until COUNT pieces. Output: one
{"text": ...} object per line, the .jsonl form tq calibrate --calibration-dataset reads.

With --heldout it writes the held-out documents instead (data/heldout.json, no python3.11-doc
needed), cut into consecutive pieces of --piece characters: a measuring instrument only. tq
calibrate on it gives the Gram matrices of the evaluation text, under which qualitybench herr
measures the error that text meets (docs/results.md); a file converted with them would have
seen the text it is evaluated on.

Usage (Debian 12, python3.11-doc 3.11.2-6+deb12u9):
  python3 testdata/trained/calib_set.py OUT.jsonl [--count 512] [--pieces 4]
  python3 testdata/trained/calib_set.py OUT.jsonl --heldout [--piece 700]
"""
import argparse
import hashlib
import json
import os
import sys

ROOT = "/usr/share/doc/python3.11/html/_sources"
PIECE = 1500
HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=512, help="pieces to write")
    ap.add_argument("--pieces", type=int, default=4, help="most pieces per document")
    ap.add_argument("--heldout", action="store_true", help="write the held-out documents instead")
    ap.add_argument("--piece", type=int, default=700, help="characters per held-out piece")
    a = ap.parse_args()
    with open(os.path.join(HERE, "data", "heldout.json"), encoding="utf-8") as fh:
        heldout = json.load(fh)["documents"]
    held = {d["path"] for d in heldout}
    if a.heldout:
        if a.piece <= 0:
            sys.exit("calib_set: --piece must be positive")
        n = 0
        with open(a.out, "w", encoding="utf-8") as fh:
            for d in heldout:
                t = d["text"]
                for s in range(0, len(t), a.piece):
                    fh.write(json.dumps({"text": t[s:s + a.piece]}) + "\n")
                    n += 1
        print(f"{n} pieces from {len(heldout)} held-out documents")
        return
    docs = []
    for d, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".rst.txt"):
                p = os.path.relpath(os.path.join(d, f), ROOT)
                if p not in held:
                    docs.append(p)
    if not docs:
        sys.exit(f"calib_set: no documents under {ROOT}; apt-get install -y python3.11-doc")
    docs.sort(key=lambda p: hashlib.sha256(("calib:" + p).encode()).hexdigest())
    out = []
    for p in docs:
        with open(os.path.join(ROOT, p), encoding="utf-8", errors="replace") as fh:
            t = fh.read()
        n = min(a.pieces, len(t) // PIECE)
        for k in range(n):
            s = (len(t) - PIECE) * k // (n - 1) if n > 1 else 0
            out.append({"text": t[s:s + PIECE]})
        if len(out) >= a.count:
            break
    with open(a.out, "w", encoding="utf-8") as fh:
        for o in out[:a.count]:
            fh.write(json.dumps(o) + "\n")
    print(f"{min(len(out), a.count)} pieces from {len(docs)} training documents ({len(held)} held out)")


if __name__ == "__main__":
    main()
