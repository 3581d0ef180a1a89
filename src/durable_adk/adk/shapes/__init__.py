"""What an ADK app is made of, read without running it.

Holds the one walk over an app's tree (:mod:`.agent_tree`: every agent,
graph node and tool, once each), the marks a tool or node carries about what
recovery may do with it (:mod:`.marks`), the optional ADK modules whose
missing dependency is remembered once (:mod:`.optional_imports`) and the
shapes refused at load because a pause in them would be lost
(:mod:`.parallel`: long-running tools in two ParallelAgent branches).

May import: ``google.adk`` and the ground floor. It is the bottom of the ADK
layer: every other package of :mod:`durable_adk.adk` may import it.
"""
