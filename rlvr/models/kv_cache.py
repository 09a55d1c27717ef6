"""A KV cache whose decoding steps write in place instead of copying the whole cache.

transformers 4.57's ``DynamicLayer.update`` appends each step's keys and values with
``torch.cat``: a copy of every layer's whole cache at every decoding step, quadratic in the
response length. On a 2-core CPU that was 13% of the eval's sampled decoding (SmolLM2-135M, batch
64, 100-token prompts: 5.9 of 46 s, cProfile). ``ReservedLayer`` keeps the keys and values in
buffers with room for the tokens to come and hands attention views of the filled part, so a step
writes one token per row; the numbers attended to are the same (``tests/test_kv_cache.py``
compares the decoded tokens and logits with ``DynamicCache``'s).

``with_room(cache, tokens)`` turns a prefilled ``DynamicCache`` (rlvr/models/prefill.py) into one
of these layers before ``generate`` continues from it. A layer whose keys were replaced from
outside (``batch_select_indices``, ``crop``, ``reorder_cache`` assign new tensors) copies them
into a fresh buffer at its next update, so every ``DynamicLayer`` operation stays valid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from transformers.cache_utils import DynamicLayer

if TYPE_CHECKING:
    import torch


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views into buffers with ``room`` tokens to
    spare; an update past the room reserves again (``room`` more), copying once."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states)
        length, new = self.get_seq_length(), key_states.shape[-2]
        if not self._in_buffer() or length + new > self._capacity():
            self._reserve(length, length + new + self.room, key_states, value_states)
        keys, values = self._key_buffer, self._value_buffer
        assert keys is not None and values is not None
        keys[:, :, length : length + new] = key_states
        values[:, :, length : length + new] = value_states
        self.keys, self.values = keys[:, :, : length + new], values[:, :, : length + new]
        return self.keys, self.values

    def _capacity(self) -> int:
        return 0 if self._key_buffer is None else int(self._key_buffer.shape[-2])

    def _in_buffer(self) -> bool:
        """The current keys and values are this layer's own views (not replaced from outside)."""
        keys, values = self._key_buffer, self._value_buffer
        cached_keys: Any = self.keys
        cached_values: Any = self.values
        return (
            keys is not None
            and values is not None
            and cached_keys.data_ptr() == keys.data_ptr()
            and cached_values.data_ptr() == values.data_ptr()
            and cached_keys.shape[:2] == keys.shape[:2]
        )

    def _reserve(
        self, length: int, capacity: int, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> None:
        """Fresh buffers of ``capacity`` tokens holding the first ``length`` cached ones."""
        buffers = []
        cached_keys: Any = self.keys
        cached_values: Any = self.values
        for cached, new in ((cached_keys, key_states), (cached_values, value_states)):
            source = cached if length else new
            buffer = source.new_empty(*source.shape[:2], capacity, source.shape[-1])
            if length:
                buffer[:, :, :length] = cached
            buffers.append(buffer)
        self._key_buffer, self._value_buffer = buffers


def with_room(cache: Any, tokens: int) -> Any:
    """``cache`` (a ``DynamicCache``) with each layer a ``ReservedLayer`` holding the same keys
    and values and room for ``tokens`` more; the same object, changed in place."""
    for index, layer in enumerate(cache.layers):
        if type(layer) is not DynamicLayer:  # sliding-window or quantised layers stay theirs
            continue
        reserved = ReservedLayer(tokens)
        if layer.is_initialized:
            keys: Any = layer.keys
            reserved.lazy_initialization(keys)
            reserved.keys, reserved.values = keys, layer.values
        cache.layers[index] = reserved
    return cache
