"""What the server does to a model's reasoning: summaries for engines without them, and sealing
for stateless clients (wrappers around the `Engine` port).
"""
