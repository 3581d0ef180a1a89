"""The A2A tables (issue 44): tasks with their versions and events, the runs they drove,
message ids taken, push configs. Core: no ADK and no A2A SDK import; bodies are
the SDK's protobuf JSON kept as text. Beside ``tables/``, on the same floor.
"""
