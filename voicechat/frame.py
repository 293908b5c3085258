"""The 80 ms frame: one step of the model's timeline and the sample rates on either side of it (docs/model.md §1.2).
Everything that counts time in frames reads it here; the app's page reads it from the server (docs/app.md)."""

FRAME_SECONDS = 0.08  # one step of the model's timeline: 1280 input samples, 1764 output samples
INPUT_SAMPLE_RATE = 16000  # what the model hears; checkpoints may say otherwise in their config
OUTPUT_SAMPLE_RATE = 22050  # what the codec speaks
