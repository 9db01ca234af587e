"""The attention core: buffers, head engines and the head sequencer that run one whole
multi-head attention layer (:class:`hw.core.attention_core.AttentionCore`)."""
