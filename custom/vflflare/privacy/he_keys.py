"""HE keys by role (issue 37): who encrypts for whom, with the labels on a site.

With `he: true` and `label_owner: site-L`, a ciphertext that goes from one party to another through the
coordinator is encrypted with the RECEIVER's key, so only the receiver can decrypt it:
- every site makes its own CKKS key pair when the job starts (`ckks.make_key_pair`: the kit context's
  parameters, TenSEAL's own randomness, the secret key in memory only, never written or sent) and
  publishes its public context, which encrypts but cannot decrypt (task KEYGEN_TASK);
- the coordinator relays the public contexts (task KEYS_TASK): the label site gets every site's, a
  feature site the label site's only (the only key it ever encrypts with, besides the shared one);
- a site encrypts each float tensor it sends with the key of the party that reads it (`PartyKeys.encrypt`):
  - a feature step's reply (representations, z_c): the label site's key;
  - the label site's reply to a step in BROADCAST_TASKS (FedHSSL's cross-party z_c): every other site's
    key, one ciphertext each (a MULTI_KEY envelope, which the coordinator opens per receiver: `address`);
  - a label-party call's reply (`label.<method>`): a dict keyed by site names (gradients, pseudo-label
    probabilities) goes each value to its site's key; any other float tensor to the label site's own key;
  - a secure-aggregation contribution (SHARED_KEY_TASKS): the kit's shared key, as the sites decrypt the sum.
- the coordinator holds only the kit's public server context: it adds ciphertexts of the shared key and
  relays the others, and refuses to send a site a ciphertext made for another party's key.

Pure: no NVFlare import (the site side is vflflare.flare.he_filters, the coordinator's flare/transport.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflflare.privacy import ckks
from vflflare.wire import LABEL_PREFIX, Payload, is_encrypted

KEYGEN_TASK = "he_keygen"  # coordinator -> site: make your key pair; reply {"public_context": bytes}
KEYS_TASK = "he_keys"  # coordinator -> site: {"public_contexts": {site: bytes}, "label_owner": .., "sites": [..]}
KEY_TASKS = (KEYGEN_TASK, KEYS_TASK)
MULTI_KEY = "__ckks_for__"  # {MULTI_KEY: {site: encrypted tensor}}: one tensor for several receivers

# site tasks whose float tensors are summed by the coordinator and decrypted by every site (secure
# aggregation): encrypted with the kit's shared key. Registered by the blocks that define them.
SHARED_KEY_TASKS: set[str] = set()
# feature steps whose reply, at the label site, goes to every other site (registered by their blocks)
BROADCAST_TASKS: set[str] = set()


def is_multi(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get(MULTI_KEY), dict) and len(value) == 1


def _map(value: Any, fn) -> Any:
    """fn on every encrypted tensor and envelope (and plaintext float array) of a payload."""
    if (
        is_encrypted(value)
        or is_multi(value)
        or (isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating))
    ):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_map(v, fn) for v in value]
    return value


def address(payload: Payload, site: str) -> Payload:
    """What the coordinator sends `site`: every envelope replaced by its ciphertext for `site`."""

    def pick(value: Any) -> Any:
        if not is_multi(value):
            return value
        if site not in value[MULTI_KEY]:
            raise ckks.HEContextError(
                f"a ciphertext for {sorted(value[MULTI_KEY])} was about to be sent to site "
                f"'{site}', which it was not encrypted for"
            )
        return value[MULTI_KEY][site]

    return _map(payload, pick)


@dataclass
class PartyKeys:
    """One site's keys in one job."""

    site: str
    label_owner: str
    sites: list[str]
    own: ckks.HEContext  # this site's key pair: the only context that decrypts what is sent to it
    shared: ckks.HEContext  # the kit's client context: secure aggregation only
    public: dict[str, ckks.HEContext] = field(default_factory=dict)  # receivers' public contexts, by site

    def owner_of(self, key: str | None) -> str | None:
        return next((s for s, ctx in self.public.items() if ctx.key_id == key), None)

    def _for(self, site: str) -> ckks.HEContext:
        if site == self.site:
            return self.own
        if site not in self.public:
            raise ckks.HEContextError(f"site '{self.site}' holds no public key of site '{site}' to encrypt for it")
        return self.public[site]

    def _to(self, value: Any, receivers: list[str]) -> Any:
        def encrypt(array: Any) -> Any:
            if not isinstance(array, np.ndarray):
                return array  # already a ciphertext
            if len(receivers) == 1:
                return ckks.encrypt(array, self._for(receivers[0]))
            return {MULTI_KEY: {s: ckks.encrypt(array, self._for(s)) for s in receivers}}

        return _map(value, encrypt)

    def _by_site(self, value: Any) -> Any:
        if isinstance(value, dict) and value and set(value) <= set(self.sites):
            return {s: self._to(v, [s]) for s, v in value.items()}
        if isinstance(value, dict):
            return {k: self._by_site(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._by_site(v) for v in value]
        return self._to(value, [self.site])  # not addressed to a site: only the label site can read it

    def receivers(self, task: str) -> list[str]:
        """Who reads the float tensors of this site's reply to a feature task."""
        if task in BROADCAST_TASKS and self.site == self.label_owner:
            return [s for s in self.sites if s != self.site] or [self.site]
        return [self.label_owner]

    def encrypt(self, task: str, payload: Payload) -> Payload:
        """Every float tensor of this site's reply to `task`, encrypted for the party that reads it."""
        if task in SHARED_KEY_TASKS:
            return ckks.encrypt_payload(payload, self.shared)
        if task.startswith(LABEL_PREFIX):
            return self._by_site(payload)
        return self._to(payload, self.receivers(task))

    def decrypt(self, payload: Payload) -> Payload:
        """Every ciphertext this site received: its own key's, or the shared key's (a secure sum). One made
        for another party's key is an error naming that party."""

        def decrypt(value: Any) -> Any:
            if is_multi(value):
                if self.site not in value[MULTI_KEY]:
                    raise ckks.HEContextError(
                        f"site '{self.site}' got a ciphertext encrypted for {sorted(value[MULTI_KEY])}"
                    )
                value = value[MULTI_KEY][self.site]
            if not is_encrypted(value):
                return value
            key = value.get("key")
            for ctx in (self.own, self.shared):
                if key == ctx.key_id:
                    return ckks.decrypt(value, ctx)
            owner = self.owner_of(key)
            whose = f"site '{owner}''s key" if owner else f"key {key}, neither its own nor the shared one"
            raise ckks.HEContextError(f"site '{self.site}' got a ciphertext made for {whose}: it cannot decrypt it")

        return _map(payload, decrypt)


def published_for(site: str, label_owner: str, published: dict[str, bytes]) -> dict[str, bytes]:
    """The public contexts a site needs: the label site every site's, a feature site the label site's."""
    return dict(published) if site == label_owner else {label_owner: published[label_owner]}
