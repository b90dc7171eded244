"""The one way the benchmarks write their results into docs/performance.md: a body between two
markers, replacing the previous body (kept below it as "Previous run:" when asked, one run deep),
or appended under a heading (with an intro) when the markers are missing. Written to a temporary
file and renamed, so a reader never sees half a document.

Usage from a bench script's embedded Python:
    sys.path.insert(0, BENCH_DIR); from doc_section import write_section
    write_section(path, begin, end, body, keep_previous=True, heading="## ...", intro="...")
"""
import os


def write_section(path, begin, end, body, keep_previous=False, heading=None, intro=""):
    text = open(path).read() if os.path.exists(path) else "# Performance\n"
    body = body.strip()
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end)
        block = begin + "\n" + body + "\n"
        prev = text[a + len(begin):b].strip().split("\n\nPrevious run:")[0].strip()
        if keep_previous and prev:
            block += "\nPrevious run:\n\n" + prev + "\n"
        text = text[:a] + block + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + (heading + "\n\n" if heading else "") + (intro.rstrip("\n") + "\n\n" if intro else "")
        text += begin + "\n" + body + "\n" + end + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":  # self-check: python3 bench/doc_section.py
    import tempfile
    d = tempfile.mkdtemp()
    p = os.path.join(d, "perf.md")
    open(p, "w").write("# Performance\n\nintro\n")
    write_section(p, "<!-- x begin -->", "<!-- x end -->", "run 1", True, "## X", "what x is")
    write_section(p, "<!-- x begin -->", "<!-- x end -->", "run 2", True)
    write_section(p, "<!-- x begin -->", "<!-- x end -->", "run 3", True)
    t = open(p).read()
    assert t == ("# Performance\n\nintro\n\n## X\n\nwhat x is\n\n<!-- x begin -->\nrun 3\n\nPrevious run:\n\nrun 2\n"
                 "<!-- x end -->\n"), t
    write_section(p, "<!-- x begin -->", "<!-- x end -->", "run 4")
    assert "Previous run" not in open(p).read()
    print("doc_section: ok")
