#!/usr/bin/env python3
"""Pastes the module graph ModuleMapTests prints into docs/ARCHITECTURE.md (run after changing Package.swift;
needs a built test bundle: `swift build --build-tests`). The test stays the judge: it derives the graph from the
manifest, this script only copies its answer between the markers."""
import re, subprocess, sys
out = subprocess.run(["swift", "test", "--skip-build", "--filter", "theDocumentedGraphIsPackageSwifts"],
                     capture_output=True, text=True).stdout
m = re.search(r"paste this between the markers of docs/ARCHITECTURE.md:\n *```text\n(.*?)\n *```", out, re.S)
if not m:
    print("module map: nothing to paste (the test passed, or did not run)"); sys.exit(0)
block = "\n".join(l[2:] if l.startswith("  ") else l for l in m.group(1).split("\n"))
doc = open("docs/ARCHITECTURE.md").read()
new = re.sub(r"(<!-- module graph:[^\n]*-->\n```text\n).*?(\n```\n<!-- end of module graph -->)",
             lambda x: x.group(1) + block + x.group(2), doc, flags=re.S)
open("docs/ARCHITECTURE.md", "w").write(new)
print("module map: docs/ARCHITECTURE.md updated")
