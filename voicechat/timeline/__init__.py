"""Conversations on the 80 ms timeline (docs/architecture.md): each conversation (conversation.py) runs in a group
whose frame loop (loop.py) steps every ready one by a position per tick; admission.py decides whether one more fits,
recording.py sets a recording up and gives it its input. A lone conversation is a group of one."""
