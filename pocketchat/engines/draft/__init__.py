"""Speculative decoding's parts that stand alone: drafters (`ngram`), the acceptance rule
(`verify`) and the policy that decides whether drafting pays here (`policy`).

The token loop proposes k tokens with a `Drafter`, decodes them in one batch with logits at
every position, keeps what `verify.accept` accepts, and rolls the rest back
(`engines/llamacpp/rollback.py`); `policy.DraftPolicy` picks k (0: a plain step) from the
measured cost of verifying k tokens and the running acceptance.
"""
