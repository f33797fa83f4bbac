"""What the library reads back from a store: a conversation's history, what the store
already knows about what a user names (extraction, lookups, ranking), the context
block a turn renders, tool calls and turn endings, paged reads over any transport.

Every reader in the package goes through these, so ``t.history``, ``show``, the audit
and the public ``neotoma_agent.reads`` read one way.
"""
