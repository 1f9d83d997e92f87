"""The restatement rule (`repeat.py`), fed whole, cut once at every character, and char by char:
every way must publish the same text and drop the same number of characters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spillguard.repeat import Repeat

PROSE = "Let me check the weather.\n"


def pieces(text: str) -> Iterator[list[str]]:
    yield [text]
    for i in range(1, len(text)):
        yield [text[:i], text[i:]]
    yield list(text)


def run(prose: str, cut: list[str]) -> tuple[str, int]:
    repeat = Repeat(prose)
    out = "".join(repeat.feed(piece) for piece in cut) + repeat.finish()
    assert repeat.holding == 0 and repeat.decided
    return out, repeat.dropped


@pytest.mark.parametrize(
    ("prose", "retry", "published"),
    [
        # the restatement and the newline the client already has
        (PROSE, PROSE + "It is sunny.", "It is sunny."),
        (PROSE, PROSE, ""),
        # surrounding whitespace does not matter
        (PROSE, "  Let me check the weather.\n\nIt is sunny.", "\nIt is sunny."),
        ("\n" + PROSE, PROSE + "It is sunny.", "It is sunny."),
        # the client's prose ends without a newline: the retry's newline stays
        ("Let me check the weather.", PROSE + "It is sunny.", "\nIt is sunny."),
        # no restatement: the text goes out as the model wrote it
        (PROSE, "Let me check the forecast.\n", "Let me check the forecast.\n"),
        (PROSE, "Let me check", "Let me check"),
        (PROSE, "It is sunny.", "It is sunny."),
        (PROSE, "   ", "   "),
        (PROSE, "", ""),
        # the restatement must be whole, and at the start
        (PROSE, "So: Let me check the weather.\n", "So: Let me check the weather.\n"),
        # mid-word is fine: what the client shows is then the retry's text exactly
        ("Let me check the weather", "Let me check the weathervane.", "vane."),
        # no prose: nothing can repeat it
        ("", PROSE, PROSE),
        (" \n", PROSE, PROSE),
    ],
)
def test_a_restatement_is_dropped_at_every_cut(prose: str, retry: str, published: str) -> None:
    want = run(prose, [retry])
    assert want[0] == published
    assert want[1] == len(retry) - len(published)
    for cut in pieces(retry):
        assert run(prose, cut) == want, cut


def test_text_that_may_still_restate_the_prose_is_held() -> None:
    repeat = Repeat(PROSE)
    assert repeat.feed("Let me ") == ""
    assert repeat.holding == len("Let me ")
    assert repeat.feed("check the weather.") == ""  # the newline may still come
    assert repeat.feed("\n") == ""
    assert repeat.decided and repeat.dropped == len(PROSE)
    assert repeat.feed("More.") == "More."  # decided: the rest passes as it is
