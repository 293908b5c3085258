"""The app's Voice controls (docs/voices.md): which voice the answer is spoken in, and the voice library's actions
(add a voice from the microphone or a file, hear a voice say a fixed sentence, rename, remove).

The library lives in ``<outputs>/voices`` (voicechat/voices.py), so it survives a restart and both tabs offer the same
voices: Record and run through :class:`VoicePanel` (Gradio widgets), Talk live through its own page
(voicechat/webui/talk.py routes, static/voices.js) on the same :class:`VoiceActions`. The actions touch files and
numpy only, on a thread with a time limit; a preview is a job of the engine, like a Run.
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Optional, Union

from voicechat import engine as eng
from voicechat.audio import write_wav
from voicechat.errors import VoiceChatError
from voicechat.limits import TimeLimit
from voicechat.voices import LIBRARY_FOLDER, PREVIEW_SENTENCE, Voice, model_library

VOICE_INFO = "The voice the answer is spoken in: the checkpoint's own, or one added under Voices."


def voice_status(kind: str, text: str) -> str:
    """The panel's one line: ``kind`` "done", "error" or "wait"."""
    return f'<div class="vc-voice-line" data-kind="{kind}">{html.escape(text)}</div>'


class VoiceActions:
    """What either tab does with the app's library. Errors are :class:`VoiceChatError`\\ s with one line."""

    def __init__(self, engine: eng.Engine, outputs: Path):
        self.engine, self.outputs = engine, Path(outputs)

    @property
    def previews(self) -> Path:
        return self.outputs / "previews"

    def library(self):
        return model_library(self.outputs / LIBRARY_FOLDER, self.engine.model)

    async def add(self, name: Optional[str], recording: Union[str, Path], source: str) -> Voice:
        """The voice, made on a thread within the time limit (docs/limits.md §2): past it, one line, and the voice
        is not stored even when its thread ends later."""
        model = self.engine.model
        if model is None:
            raise VoiceChatError("the model is not loaded yet: a voice is made for the model's TTS")
        limit = TimeLimit("making the voice")
        return await limit.run(self._add, (name or "").strip(), recording, source, model.config, limit.keep)

    def _add(self, name: str, recording: Union[str, Path], source: str, config, keep) -> Voice:
        return self.library().add(name, recording, config=config, source=source, keep=keep)

    def hear(self, name: Optional[str]) -> tuple[Voice, Path]:
        """The TTS saying the fixed sentence in the voice ``name``, written under ``previews``; waits for the
        engine (a running answer first)."""
        voice = self.library().get(name or "")
        job = self.engine.submit(eng.Request(None, None, speaker=voice, say=PREVIEW_SENTENCE))
        try:
            for event in job:
                if event.kind == eng.DONE:
                    r = event.answer.result
                    self.previews.mkdir(parents=True, exist_ok=True)
                    wav = self.previews / f"{voice.name}-{time.strftime('%Y%m%d-%H%M%S')}.wav"
                    return voice, write_wav(wav, r.audio, r.sample_rate)
                if event.terminal:
                    raise VoiceChatError(event.message)
        finally:
            job.cancel()  # the browser went away: free the engine (no-op when finished)


class VoicePanel:
    """Record and run's Voice dropdown and Voices accordion; ``build()`` inside the tab's layout returns the
    dropdown (an input of its Run)."""

    def __init__(self, engine: eng.Engine, outputs: Path):
        self.actions = VoiceActions(engine, outputs)
        self.dropdown = None

    def choices(self) -> list[tuple[str, str]]:
        return [(v.describe(), v.name) for v in self.actions.library().voices()]

    def voice(self, name: Optional[str]) -> Optional[Voice]:
        """The chosen voice for a Run (None: the checkpoint's default)."""
        return self.actions.library().get(name) if name else None

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
        # voices added in Talk live, or by the command line, appear when the dropdown is opened
        self.dropdown.focus(self.refreshed, self.dropdown, self.dropdown, api_visibility="private", queue=False,
                            show_progress="hidden")
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
    def refreshed(self, chosen: Optional[str]):
        """The library's voices now; the choice kept while it exists."""
        import gradio as gr

        choices = self.choices()
        names = [name for _, name in choices]
        return gr.Dropdown(choices=choices, value=chosen if chosen in names else names[0])

    def _changed(self, chosen: str, kind: str, text: str) -> tuple:
        import gradio as gr

        return gr.Dropdown(choices=self.choices(), value=chosen), voice_status(kind, text)

    async def add(self, name: Optional[str], recording: Optional[str]) -> tuple:
        import gradio as gr

        if not recording:
            return gr.skip(), voice_status("error", "Record the voice or drop a file first.")
        try:
            voice = await self.actions.add(name, recording, Path(recording).name)
        except VoiceChatError as e:  # AudioInputError and VoiceError included: one line
            return gr.skip(), voice_status("error", f"Not added: {e}")
        return self._changed(voice.name, "done", f"Added {voice.describe()}; it is chosen now.")

    def rename(self, chosen: Optional[str], name: Optional[str]) -> tuple:
        import gradio as gr

        try:
            voice = self.actions.library().rename(chosen or "", (name or "").strip())
        except VoiceChatError as e:
            return gr.skip(), voice_status("error", f"Not renamed: {e}")
        return self._changed(voice.name, "done", f"Renamed {chosen} to {voice.name}.")

    def remove(self, chosen: Optional[str]) -> tuple:
        import gradio as gr

        try:
            self.actions.library().remove(chosen or "")
        except VoiceChatError as e:
            return gr.skip(), voice_status("error", f"Not removed: {e}")
        return self._changed(self.choices()[0][1], "done", f"Removed {chosen}.")

    def preview(self, chosen: Optional[str]):
        """The chosen voice saying the fixed sentence (the status line says it is coming first)."""
        import gradio as gr

        yield gr.skip(), voice_status("wait", f"{chosen} is speaking the sentence…")
        try:
            voice, wav = self.actions.hear(chosen)
        except VoiceChatError as e:
            yield gr.skip(), voice_status("error", f"Cannot play it: {e}")
            return
        yield str(wav), voice_status("done", f"{voice.name}: \u201c{PREVIEW_SENTENCE}\u201d")
