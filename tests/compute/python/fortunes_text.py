"""The built-in fortunes text, cut as docs/DETERMINISM.md, "Text", says: the pinned files in order,
split into fortunes at lines "%", every 20th fortune to the test stream, each followed by "%\\n"."""
import hashlib
import os

FILES = ["art", "ascii-art", "computers", "cookie", "debian", "definitions", "disclaimer", "drugs", "education",
         "ethnic", "food", "fortunes", "goedel", "humorists", "kids", "knghtbrd", "law", "linux", "linuxcookie",
         "literature", "love", "magic", "medicine", "men-women", "miscellaneous", "news", "paradoxum", "people", "perl",
         "pets", "platitudes", "politics", "pratchett", "riddles", "science", "songs-poems", "sports", "startrek", "tao",
         "translate-me", "wisdom", "work", "zippy"]
SHA256 = "fbc2d796dde8ea64a51345ce4c18ff486a778a2d2259603987073bedb3fc3cd7"


def streams(directory):
    """(fortunes, train bytes, test bytes, whether the files are the pinned ones)."""
    fortunes, whole = [], hashlib.sha256()
    for name in FILES:
        data = open(os.path.join(directory, name), "rb").read()
        whole.update(data)
        lines = data.split(b"\n")
        if data.endswith(b"\n"):
            lines = lines[:-1]
        current = b""
        for line in lines:
            if line == b"%":
                if current:
                    fortunes.append(current)
                current = b""
            else:
                current += line + b"\n"
        if current:
            fortunes.append(current)
    train = b"".join(f + b"%\n" for i, f in enumerate(fortunes) if i % 20 != 19)
    test = b"".join(f + b"%\n" for i, f in enumerate(fortunes) if i % 20 == 19)
    return fortunes, train, test, whole.hexdigest() == SHA256
