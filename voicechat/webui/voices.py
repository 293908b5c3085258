"""The app's Voice control (docs/voices.md): which voice the answer is spoken in, and the voice library's panel (add
a voice from the microphone or a file, hear a voice say a fixed sentence, rename, remove).

The library lives in ``<outputs>/voices`` (voicechat/voices.py), so it survives a restart and the Talk live tab
(voicechat/webui/talk.py, through the Realtime server) offers the same voices. The handlers touch files and numpy
only; a preview is a job of the engine, like a Run.
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Optional

from voicechat import engine as eng
from voicechat.audio import write_wav
from voicechat.errors import AudioInputError, VoiceChatError
from voicechat.voices import LIBRARY_FOLDER, PREVIEW_SENTENCE, Voice, model_library

VOICE_INFO = "The voice the answer is spoken in: the checkpoint's own, or one added under Voices."


def voice_status(kind: str, text: str) -> str:
    """The panel's one line: ``kind`` "done", "error" or "wait"."""
    return f'<div class="vc-voice-line" data-kind="{kind}">{html.escape(text)}</div>'


class VoicePanel:
    """The Voice dropdown and the Voices accordion of a tab; ``build()`` inside the tab's layout returns the
    dropdown (an input of its Run)."""

    def __init__(self, engine: eng.Engine, outputs: Path):
        self.engine, self.outputs = engine, Path(outputs)
        self.dropdown = None

    def library(self):
        return model_library(self.outputs / LIBRARY_FOLDER, self.engine.model)

    def choices(self) -> list[tuple[str, str]]:
        return [(v.describe(), v.name) for v in self.library().voices()]

    def voice(self, name: Optional[str]) -> Optional[Voice]:
        """The chosen voice for a Run (None: the checkpoint's default)."""
        return self.library().get(name) if name else None

    # ---- the widgets -------------------------------------------------------------------------------------------
    def build(self):
        import gradio as gr

        choices = self.choices()
        self.dropdown = gr.Dropdown(choices, value=choices[0][1], label="Voice", info=VOICE_INFO, elem_id="vc-voice")
        with gr.Accordion("Voices: add one from a recording, hear one, rename, remove", open=False,
                          elem_id="vc-voices"):
            recording = gr.Audio(sources=["upload", "microphone"], type="filepath", elem_id="vc-voice-recording",
                                 label="A recording of the new voice (3 s or more of one person speaking)")
            name = gr.Textbox(label="Name", placeholder="e.g. Maya", max_lines=1, elem_id="vc-voice-name",
                              info="Up to 32 letters, digits, spaces, - or _. Also the new name for Rename.")
            with gr.Row():
                add = gr.Button("Add", size="sm", elem_id="vc-voice-add")
                hear = gr.Button("Hear", size="sm", elem_id="vc-voice-preview")
                rename = gr.Button("Rename", size="sm", elem_id="vc-voice-rename")
                remove = gr.Button("Remove", size="sm", variant="stop", elem_id="vc-voice-remove")
            line = gr.HTML(voice_status("idle", "Hear, Rename and Remove act on the Voice chosen above; Hear lets it "
                                                f"say \u201c{PREVIEW_SENTENCE}\u201d"), elem_id="vc-voice-status")
            heard = gr.Audio(label="The chosen voice", type="filepath", interactive=False, autoplay=True,
                             elem_id="vc-voice-heard")
        changes = [self.dropdown, line]
        add.click(self.add, [name, recording], changes, api_name="add_voice", queue=False)
        rename.click(self.rename, [self.dropdown, name], changes, api_name="rename_voice", queue=False)
        remove.click(self.remove, self.dropdown, changes, api_name="remove_voice", queue=False)
        hear.click(self.preview, self.dropdown, [heard, line], api_name="hear_voice", concurrency_limit=None,
                   show_progress="hidden")
        return self.dropdown

    def on_model(self, status: eng.EngineStatus):
        """The dropdown once the model is loaded: its voices first, the checkpoint's default chosen."""
        import gradio as gr

        if status.state != eng.READY:
            return gr.skip()
        choices = self.choices()
        return gr.Dropdown(choices=choices, value=choices[0][1])

    # ---- the handlers ------------------------------------------------------------------------------------------
    def _changed(self, chosen: str, kind: str, text: str) -> tuple:
        import gradio as gr

        return gr.Dropdown(choices=self.choices(), value=chosen), voice_status(kind, text)

    def _model_config(self):
        model = self.engine.model
        if model is None:
            raise VoiceChatError("the model is not loaded yet: a voice is made for the model's TTS")
        return model.config

    def add(self, name: Optional[str], recording: Optional[str]) -> tuple:
        import gradio as gr

        if not recording:
            return gr.skip(), voice_status("error", "Record the voice or drop a file first.")
        try:
            voice = self.library().add((name or "").strip(), recording, config=self._model_config(),
                                       source=Path(recording).name)
        except VoiceChatError as e:  # AudioInputError and VoiceError included: one line
            return gr.skip(), voice_status("error", f"Not added: {e}")
        return self._changed(voice.name, "done", f"Added {voice.describe()}; it is chosen now.")

    def rename(self, chosen: Optional[str], name: Optional[str]) -> tuple:
        import gradio as gr

        try:
            voice = self.library().rename(chosen or "", (name or "").strip())
        except VoiceChatError as e:
            return gr.skip(), voice_status("error", f"Not renamed: {e}")
        return self._changed(voice.name, "done", f"Renamed {chosen} to {voice.name}.")

    def remove(self, chosen: Optional[str]) -> tuple:
        import gradio as gr

        try:
            self.library().remove(chosen or "")
        except VoiceChatError as e:
            return gr.skip(), voice_status("error", f"Not removed: {e}")
        return self._changed(self.choices()[0][1], "done", f"Removed {chosen}.")

    def preview(self, chosen: Optional[str]):
        """The TTS saying the fixed sentence in the chosen voice (an engine job: it waits for a running answer)."""
        import gradio as gr

        try:
            voice = self.library().get(chosen or "")
            job = self.engine.submit(eng.Request(None, None, speaker=voice, say=PREVIEW_SENTENCE))
        except (VoiceChatError, AudioInputError) as e:
            yield gr.skip(), voice_status("error", f"Cannot play it: {e}")
            return
        yield gr.skip(), voice_status("wait", f"{voice.name} is speaking the sentence…")
        try:
            for event in job:
                if event.kind == eng.DONE:
                    r = event.answer.result
                    folder = self.outputs / "previews"
                    folder.mkdir(parents=True, exist_ok=True)
                    wav = write_wav(folder / f"{voice.name}-{time.strftime('%Y%m%d-%H%M%S')}.wav", r.audio,
                                    r.sample_rate)
                    yield str(wav), voice_status("done", f"{voice.name}: \u201c{PREVIEW_SENTENCE}\u201d")
                elif event.terminal:
                    yield gr.skip(), voice_status("error", f"Cannot play it: {event.message}")
        finally:
            job.cancel()  # the browser went away: free the engine (no-op when finished)
