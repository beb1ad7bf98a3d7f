"""Profile files are read bounded and contained: a huge file is refused before it is
parsed, and nothing whose real path leaves the allowed roots is read or quoted."""

from __future__ import annotations

import os
import shutil

import pytest

import scheduler_core.profile_files as profile_files
from scheduler_core.profile import ProfileError
from scheduler_core.profile_files import MAX_PROFILE_BYTES, load_profile, load_profile_dir

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
T4 = os.path.join(REPO_ROOT, "model_repository", "emulated_explicit", "profiles", "t4.yaml")
SECRET = "s3cr3t-outside-the-repository"


@pytest.fixture
def layout(tmp_path):
    """repo/model/profiles/t4.yaml, and a folder outside the repository holding a profile
    and a 'secret' file."""
    repo = tmp_path / "repo"
    profiles = repo / "model" / "profiles"
    profiles.mkdir(parents=True)
    shutil.copy(T4, profiles / "t4.yaml")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(T4, outside / "t4.yaml")
    (outside / "secret.yaml").write_text(f"name: {SECRET}\n{SECRET}: [\n")
    return repo, profiles, outside


def test_a_contained_folder_loads(layout):
    repo, profiles, _ = layout
    assert set(load_profile_dir(str(profiles), allowed_roots=[str(repo)])) == {"t4"}


def test_a_profile_dir_that_is_a_symlink_out_of_the_repository_is_refused(layout):
    repo, _, outside = layout
    link = repo / "model" / "linked"
    link.symlink_to(outside, target_is_directory=True)
    with pytest.raises(ProfileError) as err:
        load_profile_dir(str(link), allowed_roots=[str(repo)])
    assert "resolves outside the model repository" in str(err.value)
    assert str(outside) not in str(err.value)


def test_a_profile_symlinked_to_a_file_outside_is_refused_unread(layout):
    repo, profiles, outside = layout
    (profiles / "secret.yaml").symlink_to(outside / "secret.yaml")
    with pytest.raises(ProfileError) as err:
        load_profile_dir(str(profiles), allowed_roots=[str(repo)])
    message = str(err.value)
    assert "secret.yaml: resolves outside the model repository" in message
    assert SECRET not in message and str(outside) not in message


def test_etc_passwd_behind_a_symlink_is_never_quoted(layout):
    repo, profiles, _ = layout
    if not os.path.exists("/etc/passwd"):
        pytest.skip("no /etc/passwd here")
    (profiles / "passwd.yaml").symlink_to("/etc/passwd")
    with pytest.raises(ProfileError) as err:
        load_profile_dir(str(profiles), allowed_roots=[str(repo)])
    assert "root:" not in str(err.value) and "/etc/passwd" not in str(err.value)


def test_a_huge_profile_is_refused_before_parsing(tmp_path, monkeypatch):
    huge = tmp_path / "huge.yaml"
    with open(huge, "w") as fh:
        fh.write("name: huge\ndescription: |\n")
        line = "  " + "x" * 1022 + "\n"
        for _ in range(100 * 1024):  # 100 MB
            fh.write(line)
    def no_parse(*args, **kwargs):
        raise AssertionError("the huge profile reached the YAML parser")

    monkeypatch.setattr(profile_files.yaml, "safe_load", no_parse)
    with pytest.raises(ProfileError, match=rf"over the {MAX_PROFILE_BYTES}-byte limit"):
        load_profile(str(huge))


def test_a_file_just_under_the_limit_still_loads(tmp_path):
    text = open(T4).read()
    padded = text + "#" * (MAX_PROFILE_BYTES - len(text.encode()) - 1) + "\n"
    path = tmp_path / "t4.yaml"
    path.write_text(padded)
    assert len(padded.encode()) == MAX_PROFILE_BYTES
    assert load_profile(str(path)).name == "t4"
