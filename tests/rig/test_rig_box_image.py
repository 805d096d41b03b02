"""Box image recipe pieces that need no engine: the apt mirror and the layer's stable bytes."""

from __future__ import annotations

import tarfile
from io import BytesIO

import pytest

from rig.box_image import ImageError, LayerEntry, apt_mirror, layer_entries, layer_tar

DEB822 = """\
Types: deb
URIs: http://security.example.org/debian-security
Suites: bookworm-security
Components: main

# the main archive
Types: deb deb-src
URIs: http://mirror.example.org/debian http://other.example.org/debian
Suites: bookworm bookworm-updates
Components: main
"""


def write_apt(tmp_path, *, sources: str | None = None, one_line: str | None = None):
    (tmp_path / "sources.list.d").mkdir()
    if sources is not None:
        (tmp_path / "sources.list.d" / "debian.sources").write_text(sources)
    if one_line is not None:
        (tmp_path / "sources.list").write_text(one_line)
    return tmp_path


def test_mirror_from_deb822_skips_other_suites(tmp_path):
    assert apt_mirror(write_apt(tmp_path, sources=DEB822)) == "http://mirror.example.org/debian"


def test_mirror_from_one_line_format_with_options(tmp_path):
    text = (
        "# deb http://commented.example.org/debian bookworm main\n"
        "deb http://security.example.org/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://one.example.org/debian bookworm main\n"
    )
    assert apt_mirror(write_apt(tmp_path, one_line=text)) == "http://one.example.org/debian"


def test_no_bookworm_source_is_an_error(tmp_path):
    apt_dir = write_apt(tmp_path, one_line="deb http://x.example.org/debian trixie main\n")
    with pytest.raises(ImageError, match="no apt source"):
        apt_mirror(apt_dir)


def test_layer_installs_the_stubs_where_the_real_tools_live():
    with tarfile.open(fileobj=BytesIO(layer_tar(layer_entries()))) as archive:
        members = {member.name: member for member in archive.getmembers()}
        vllm = archive.extractfile("usr/local/bin/vllm").read()
    assert vllm.startswith(b"#!/usr/bin/env python3")
    assert members["usr/local/bin/vllm"].mode == 0o755
    assert members["usr/bin/nvidia-smi"].mode == 0o755
    assert members["etc/llmao-stub"].isdir()
    assert {member.uid for member in members.values()} == {0}


def test_layer_bytes_depend_only_on_content():
    # The box tag is a hash of these bytes: equal content must give equal bytes, a change a new tag.
    entries = [LayerEntry("usr/bin/x", 0o755, b"one")]
    assert layer_tar(entries) == layer_tar(list(entries))
    assert layer_tar(entries) != layer_tar([LayerEntry("usr/bin/x", 0o755, b"two")])
