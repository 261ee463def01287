#!/usr/bin/env python3
"""Extract the text corpus of the trained test models and split it by document.

Source: the reStructuredText sources of the Python 3.11 documentation as Debian ships them
in python3.11-doc (/usr/share/doc/python3.11/html/_sources/**/*.rst.txt, 497 files, about
12 MB of technical English prose with code examples). One file is one document.

Split (deterministic, by document, never inside one):
  held-out  documents of 3-8 KB taken in the order of sha256("heldout:" + relative path)
            until they hold >= HELDOUT_BYTES bytes. Neither training nor tq calibrate (which
            uses its own 32 built-in prompts, calib/prompts) sees them.
  train     every other document.

Outputs:
  testdata/trained/data/heldout.json         held-out documents: path + text (committed)
  testdata/trained/data/heldout-tokens.json  their token ids under the fixtures' tokenizer (committed)
  WORK/train.u16                             training token ids, uint16 little-endian, each
                                             document preceded by <|endoftext|> (1500)
  WORK/train-docs.json                       the training documents' paths and token counts

Usage (Debian 12, python3.11-doc 3.11.2-6+deb12u9, tq built from this tree):
  apt-get install -y python3.11-doc=3.11.2-6+deb12u9
  go build -o /tmp/tq ./cmd/tq
  go run ./internal/fixtures/cmd/tq-genmodel -arch qwen3 -out /tmp/tq-trained/fixture
  python3 testdata/trained/prepare_data.py --tq /tmp/tq --tokenizer /tmp/tq-trained/fixture --work /tmp/tq-trained
Token ids come from `tq tokenize DIR --file DOC --no-special` with the internal/fixtures
byte-level BPE (the tokenizer files of every fixture folder, copied into the three models).
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys

PACKAGE = "python3.11-doc"
VERSION = "3.11.2-6+deb12u9"
ROOT = "/usr/share/doc/python3.11/html/_sources"
HELDOUT_BYTES = 24 * 1024
HELDOUT_MIN, HELDOUT_MAX = 3 * 1024, 8 * 1024
EOT = 1500  # <|endoftext|>
HERE = os.path.dirname(os.path.abspath(__file__))


def installed_version():
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"prepare_data: {PACKAGE} is not installed ({e}); apt-get install -y {PACKAGE}={VERSION}")
    return out.stdout.strip()


def documents():
    docs = []
    for d, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".rst.txt"):
                continue
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                text = fh.read().decode("utf-8").replace("\r\n", "\n")
            docs.append((os.path.relpath(p, ROOT), text))
    docs.sort()
    return docs


def tokenize(tq, model, text, tmp):
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    out = subprocess.run([tq, "tokenize", model, "--file", tmp, "--no-special"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tq", required=True, help="path of a tq binary built from this tree")
    ap.add_argument("--tokenizer", required=True, help="a folder with the fixtures' tokenizer.json and tokenizer_config.json")
    ap.add_argument("--work", required=True, help="folder for the (uncommitted) training tokens")
    ap.add_argument("--allow-other-version", action="store_true")
    a = ap.parse_args()
    v = installed_version()
    if v != VERSION and not a.allow_other_version:
        sys.exit(f"prepare_data: {PACKAGE} {v} is installed, the committed split was made from {VERSION}")
    docs = documents()
    if not docs:
        sys.exit(f"prepare_data: no documents under {ROOT}")
    order = sorted(docs, key=lambda d: hashlib.sha256(("heldout:" + d[0]).encode()).hexdigest())
    held, total = set(), 0
    for path, text in order:
        if total >= HELDOUT_BYTES:
            break
        if HELDOUT_MIN <= len(text.encode()) <= HELDOUT_MAX:
            held.add(path)
            total += len(text.encode())
    model = a.tokenizer
    os.makedirs(a.work, exist_ok=True)
    tmp = os.path.join(a.work, "doc.txt")
    hdocs, htoks = [], []
    train, tdocs = [], []
    corpus = hashlib.sha256()
    for path, text in docs:
        corpus.update(path.encode() + b"\0" + text.encode() + b"\0")
        ids = tokenize(a.tq, model, text, tmp)
        if path in held:
            hdocs.append({"path": path, "text": text})
            htoks.append({"path": path, "ids": ids})
        else:
            train.append(EOT)
            train.extend(ids)
            tdocs.append({"path": path, "tokens": len(ids)})
    os.remove(tmp)
    src = {"package": PACKAGE, "version": VERSION, "root": ROOT, "documents": len(docs),
           "corpus_sha256": corpus.hexdigest(), "license": "Python documentation, PSF License Agreement (see /usr/share/doc/python3.11/copyright)"}
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    with open(os.path.join(HERE, "data", "heldout.json"), "w", encoding="utf-8") as fh:
        json.dump({"source": src, "documents": hdocs}, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    with open(os.path.join(HERE, "data", "heldout-tokens.json"), "w") as fh:
        fh.write('{"tokenizer": "internal/fixtures byte-level BPE (testdata/trained/*/tokenizer.json)",\n')
        fh.write(' "eot": %d,\n "documents": [\n' % EOT)
        fh.write(",\n".join('  {"path": %s, "ids": %s}' % (json.dumps(d["path"]), json.dumps(d["ids"], separators=(",", ":"))) for d in htoks))
        fh.write("\n ]}\n")
    with open(os.path.join(a.work, "train.u16"), "wb") as fh:
        fh.write(struct.pack("<%dH" % len(train), *train))
    with open(os.path.join(a.work, "train-docs.json"), "w") as fh:
        json.dump({"source": src, "documents": tdocs}, fh, indent=1)
    print(f"{len(docs)} documents (corpus sha256 {corpus.hexdigest()[:16]}...): "
          f"{len(hdocs)} held out ({total} bytes, {sum(len(d['ids']) for d in htoks)} tokens), "
          f"{len(tdocs)} for training ({len(train)} tokens)")


if __name__ == "__main__":
    main()
