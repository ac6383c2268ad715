"""AdminComment: the site's text verbatim, slurmpool's note and summary each in its place."""

from __future__ import annotations

import pytest

from slurmpool.slurm.admin_comment import AdminComment, is_summary_word

SUMMARY = "sp1:sbx1,0,mig:f3d6qk"


@pytest.mark.parametrize(
    ("text", "site", "note", "summary"),
    [
        (None, "", None, None),
        ("", "", None, None),
        ("budget=cs101", "budget=cs101", None, None),
        ("a | b", "a | b", None, None),
        ("slurmpool: requeued 1x", "", "requeued 1x", None),
        (SUMMARY, "", None, SUMMARY),
        (
            f"budget=cs101 | slurmpool: requeued 2x | {SUMMARY}",
            "budget=cs101",
            "requeued 2x",
            SUMMARY,
        ),
        # An admin's words that look like ours stay the admin's.
        ("sp1:ABC def", "sp1:ABC def", None, None),
        (f"sp1:ABC def | {SUMMARY}", "sp1:ABC def", None, SUMMARY),
        ("x | slurmpool is great", "x | slurmpool is great", None, None),
        # Older slurmpool: the summary after the site's words with a space, a note after it.
        (f"site `note` {SUMMARY}", "site `note`", None, SUMMARY),
        (f"site {SUMMARY} | slurmpool: requeued 1x", "site", "requeued 1x", SUMMARY),
        # 22.05's sacctmgr lowercases everything it stores.
        (f"SITE | SLURMPOOL: requeued | {SUMMARY.upper()}", "SITE", "requeued", SUMMARY.upper()),
    ],
)
def test_parse(text: str | None, site: str, note: str | None, summary: str | None) -> None:
    assert AdminComment.parse(text) == AdminComment(site, note, summary)


def test_each_writer_replaces_only_its_part_whatever_the_order() -> None:
    site = '  budget=cs101;  owner "x" | a  '
    note_first = AdminComment.parse(site).with_note("requeued 1x on no room")
    summary_first = AdminComment.parse(site).with_summary(SUMMARY)
    a = AdminComment.parse(note_first.text()).with_summary(SUMMARY).text()
    b = AdminComment.parse(summary_first.text()).with_note("requeued 1x on no room").text()
    assert a == b == f"{site} | slurmpool: requeued 1x on no room | {SUMMARY}"
    # Writing again replaces, never stacks.
    again = AdminComment.parse(a).with_note("requeued 2x").with_summary("sp1::new").text()
    assert again == f"{site} | slurmpool: requeued 2x | sp1::new"
    assert AdminComment.parse(again).site == site


def test_a_note_is_one_line() -> None:
    text = AdminComment().with_note("no room\n  for 7g").text()
    assert text == "slurmpool: no room for 7g"


def test_a_summary_is_one_word() -> None:
    assert is_summary_word("sp2:a:b") and not is_summary_word("sp1:a b")
    with pytest.raises(ValueError, match="not a summary word"):
        AdminComment().with_summary("sp1:a b")
