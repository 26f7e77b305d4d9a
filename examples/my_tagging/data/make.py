"""Writes train.jsonl and dev.jsonl: sentences of a toy grammar with their parts of speech.
Six words are a noun or a verb by where they stand ("the watch" / "watch the"), so a tagger needs
the context. Run from this folder: python make.py (seeded: the same files every time)."""

import json
import random

r = random.Random(7)
DET = ["the", "a", "every", "this", "that"]
ADJ = ["small", "red", "quiet", "old", "bright", "heavy", "quick"]
BOTH = ["watch", "fish", "light", "ring", "paint", "saw"]
NOUN = ["dog", "river", "teacher", "machine", "garden", "letter", "city", "song", "window", "farmer", *BOTH]
VERB = ["see", "find", "build", "like", "move", "follow", "open", *BOTH]
ADV = ["slowly", "often", "never", "quickly", "again"]


def noun_phrase():
    w, t = [r.choice(DET)], ["DET"]
    if r.random() < 0.5:
        w.append(r.choice(ADJ))
        t.append("ADJ")
    w.append(r.choice(NOUN))
    t.append("NOUN")
    return w, t


def sentence():
    a, ta = noun_phrase()
    b, tb = noun_phrase()
    w, t = a + [r.choice(VERB)] + b, ta + ["VERB"] + tb
    if r.random() < 0.4:
        w.insert(len(a), r.choice(ADV))
        t.insert(len(a), "ADV")
    return {"words": w, "tags": t}


for name, n in (("train", 480), ("dev", 120)):
    with open(f"{name}.jsonl", "w") as f:
        for _ in range(n):
            f.write(json.dumps(sentence()) + "\n")
