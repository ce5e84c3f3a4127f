"""An OpenAI-compatible server over the sampling engine, with token-exact capture for RL.

  schemas       the request bodies (pydantic)
  errors        OpenAI-shaped error bodies and their HTTP statuses
  trajectories  requests of one trajectory id as one append-only token stream; finished ones
                as `Rollout` records
  service       request -> prompt tokens -> engine -> choices
  responses     response bodies and streamed chunks
  app           the FastAPI app (routes, API key, body-size and concurrency limits)
  groups        finished trajectories into the RL pipeline's GRPO groups
  task_gateway  the controller's routes for agents being trained: the environment's reward
  agent_rollouts  the pipeline's groups played by an agent program over the server

`launch/serve.py` serves a run, configs/local_openai_agent.py trains an agent program through
it; docs/serving.md is the user's guide.
"""
