"""The x402 package's EVM helpers, imported once and quietly.

``x402.mechanisms.evm`` imports web3, which imports the deprecated
``websockets.legacy`` and warns about it at import time. That warning is
about a third-party dependency chain, not about our code, so it is silenced
here, in the one place that imports the EVM mechanism.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"websockets\..*")
    warnings.filterwarnings(
        "ignore", message=r"websockets\.legacy is deprecated", category=DeprecationWarning
    )
    from x402.mechanisms.evm import (
        ERR_NONCE_ALREADY_USED,
        ExactEIP3009Authorization,
        get_evm_chain_id,
        verify_eoa_signature,
    )
    from x402.mechanisms.evm.eip712 import hash_eip3009_authorization
    from x402.mechanisms.evm.exact import ExactEvmServerScheme, register_exact_evm_client
    from x402.mechanisms.evm.utils import get_asset_info, is_valid_address

__all__ = [
    "ERR_NONCE_ALREADY_USED",
    "ExactEIP3009Authorization",
    "ExactEvmServerScheme",
    "get_asset_info",
    "get_evm_chain_id",
    "hash_eip3009_authorization",
    "is_valid_address",
    "register_exact_evm_client",
    "verify_eoa_signature",
]
