"""The steward's purge list: what ``add_purge`` records and what ``load_purges`` accepts back."""

from __future__ import annotations

import json

import pytest

from chunker.fold import PurgeSpan
from daemon.refresher.purges import PURGES_FILE, PurgeFileError, add_purge, load_purges


def test_recorded_spans_load_back_sorted_and_once(tmp_path):
    assert add_purge(tmp_path, "#town:hs", 50, 60) is True
    assert add_purge(tmp_path, "#town:hs", 10, 20) is True
    assert add_purge(tmp_path, "#town:hs", 10, 20) is False
    assert load_purges(tmp_path) == {"#town:hs": (PurgeSpan(10, 20), PurgeSpan(50, 60))}


@pytest.mark.parametrize("spans", [[[60, 50]], [[True, 5]], [[1, 2, 3]], [["1", "2"]], "1..2"])
def test_a_hand_edited_file_with_a_bad_span_is_a_purge_file_error_naming_the_room(tmp_path, spans):
    (tmp_path / PURGES_FILE).write_text(json.dumps({"!room:hs": spans}))
    with pytest.raises(PurgeFileError, match="'!room:hs'"):
        load_purges(tmp_path)
