"""Helpers for tests that need real OS behaviour."""

from __future__ import annotations

import ctypes
import io
import zipfile


def drop_file_permission_override() -> None:
    # Root bypasses permission bits through CAP_DAC_OVERRIDE and
    # CAP_DAC_READ_SEARCH. Dropping them from the bounding set before exec
    # leaves the child a root that chmod 000 really stops.
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2
    for cap in (cap_dac_override, cap_dac_read_search):
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def zip_bytes(members: dict[str, bytes | str], compression: int = zipfile.ZIP_STORED) -> bytes:
    """A zip archive holding ``members`` (name to content), in memory."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()
