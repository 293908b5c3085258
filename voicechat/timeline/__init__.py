"""Conversations on the 80 ms timeline (docs/architecture.md): each conversation (conversation.py) runs in a group
whose frame loop (loop.py) steps every ready one by a position per tick; a lone conversation is a group of one."""
