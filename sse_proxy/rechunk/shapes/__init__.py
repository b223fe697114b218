"""Shape and token variants: one module per dialect (who sends each shape), and
:mod:`.rewriter`, which applies them to a stream."""
