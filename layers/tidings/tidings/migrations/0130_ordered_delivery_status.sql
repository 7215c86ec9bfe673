-- Ordered delivery (FIFO endpoints): a message that waits behind the head of its line is
-- 'waiting'. It is outside the claim's partial index (messages_claimable), so a line's backlog
-- costs the claim nothing: only the head of each line is claimable. A value added to an enum
-- cannot be used in the transaction that adds it, hence a migration of its own (0131 uses it).
--
-- Locks: the type's catalog row only.
ALTER TYPE tidings.message_status ADD VALUE IF NOT EXISTS 'waiting';
