"""``voicechat batch``: answer a test set (a folder of recordings, a JSONL manifest or a Full-Duplex-Bench root) into
one output folder, resumably (docs/batch.md).

Layout of ``--out DIR``: ``run.json`` (what the run was asked), ``summary.jsonl`` (one line per item, then a totals
line) and ``items/{ID}/``: ``answer.wav`` and ``conversation.json`` (what ``generate`` and ``generate --json``
write), plus, for a Full-Duplex-Bench root, ``output.wav``, ``output.json`` and the sample's own JSON files, so that
``items/`` is a root the benchmark's ``evaluate.py`` scores. Every file is written under a temporary name and renamed
(:func:`voicechat.files.write_atomically`); ``conversation.json`` comes last and marks the item complete.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .audio import duration_words, read_recording, resample, wav_bytes
from .config import FRAME_SECONDS, GenerationConfig
from .errors import TestSetError, VoiceChatError
from .files import TEMPORARY, write_atomically
from .limits import SettingError, checked_prompt, checked_seed

FOLDER, MANIFEST, FDB = "folder", "manifest", "fdb"
FORMATS = (FOLDER, MANIFEST, FDB)
RUN_FILE, SUMMARY_FILE, ITEMS_FOLDER = "run.json", "summary.jsonl", "items"
ANSWER_FILE, RECORD_FILE = "answer.wav", "conversation.json"
FDB_INPUT, FDB_WAV, FDB_JSON, FDB_INTERRUPT = "input.wav", "output.wav", "output.json", "interrupt.json"
FDB_SCORED = {FDB_JSON, "clean_output.json", "rating.json"}  # an earlier model's transcripts and its judge's rating
# The benchmark reads output.wav at 16 kHz: its backchannel scoring runs Silero VAD at that library's default rate
# and its ASR pass (get_transcript/asr.py) feeds parakeet-tdt the file as it is (docs/batch.md §3).
FDB_SAMPLE_RATE = 16000
AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".m4a", ".aac", ".opus", ".webm", ".caf", ".aiff", ".aif", ".mp4"}
MANIFEST_KEYS = {"audio", "id", "system_prompt", "seed", "speaker", "extra_seconds"}


@dataclass(frozen=True)
class Item:
    """One recording to answer. None fields take the run's value."""

    id: str  # a relative path without suffix: the item's folder under items/
    audio: Path
    system_prompt: Optional[str] = None
    seed: Optional[int] = None
    speaker: Optional[str] = None
    extra_seconds: Optional[float] = None
    annotations: tuple = ()  # Full-Duplex-Bench: the sample's JSON files, copied beside the outputs


# ----------------------------------------------------------------------------------------------------------------
# finding the items
# ----------------------------------------------------------------------------------------------------------------
def detect_format(source: Path) -> str:
    """A .jsonl file is a manifest; a folder whose subfolders hold ``input.wav`` (and which holds no recording at its
    top) is a Full-Duplex-Bench root; any other folder is a folder of recordings."""
    if source.is_file():
        if source.suffix.lower() in AUDIO_SUFFIXES:
            raise TestSetError(f"{source.name} is one recording; give a folder or a manifest (or use generate)")
        return MANIFEST
    if not source.is_dir():
        raise TestSetError(f"{source}: no such file or folder")
    top_audio = any(p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES for p in source.iterdir())
    samples = any((p / FDB_INPUT).is_file() for p in source.iterdir() if p.is_dir())
    return FDB if samples and not top_audio else FOLDER


def find_items(source: Path, fmt: Optional[str] = None) -> tuple[str, list[Item]]:
    """(format, items in order), checked: at least one item, no id twice. Raises TestSetError."""
    fmt = fmt or detect_format(source)
    items = {FOLDER: folder_items, MANIFEST: manifest_items, FDB: fdb_items}[fmt](source)
    if not items:
        raise TestSetError(f"{source} holds no {'recordings' if fmt == FOLDER else 'items'} ({fmt} format)")
    seen: dict[str, Path] = {}
    for item in items:
        if item.id in seen:
            raise TestSetError(f"two items have the id {item.id!r} ({seen[item.id].name} and {item.audio.name}); "
                               "give each a distinct name or id")
        seen[item.id] = item.audio
    return fmt, items


def folder_items(root: Path) -> list[Item]:
    """Every recording under ``root``, recursively, sorted; the id is its path without the suffix."""
    if not root.is_dir():
        raise TestSetError(f"{root} is not a folder")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
    return [Item(p.relative_to(root).with_suffix("").as_posix(), p) for p in files]


def fdb_items(root: Path) -> list[Item]:
    """Full-Duplex-Bench: each subfolder ``{ID}`` with an ``input.wav``; its JSON files (pause.json, turn_taking.json,
    interrupt.json, transcription.json, metadata.json ...) go along, not those an earlier model's scoring wrote."""
    if not root.is_dir():
        raise TestSetError(f"{root} is not a folder")
    folders = sorted((p for p in root.iterdir() if (p / FDB_INPUT).is_file()), key=lambda p: natural_key(p.name))
    return [Item(p.name, p / FDB_INPUT, annotations=tuple(sorted(
        f for f in p.iterdir() if f.is_file() and f.suffix == ".json" and f.name not in FDB_SCORED))) for p in folders]


def natural_key(name: str) -> tuple:
    """'2' before '10' (the benchmark's sample folders are numbers)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part)


def manifest_items(path: Path) -> list[Item]:
    """One JSON object per line: ``audio`` (relative to the manifest's folder) and optional ``id``, ``system_prompt``,
    ``seed``, ``speaker``, ``extra_seconds``; blank lines are skipped. A line that is not such an object stops the
    run before the model loads."""
    if not path.is_file():
        raise TestSetError(f"{path} is not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TestSetError(f"{path.name} is not a text file; a manifest holds one JSON object per line") from None
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            items.append(manifest_item(line, path, number))
    return items


def manifest_item(line: str, path: Path, number: int) -> Item:
    where = f"{path.name} line {number}"
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as e:
        raise TestSetError(f"{where} is not JSON ({e.msg})") from None
    if not isinstance(entry, dict) or not isinstance(entry.get("audio"), str):
        raise TestSetError(f'{where}: give an object with "audio": "path of the recording"')
    if unknown := sorted(set(entry) - MANIFEST_KEYS):
        raise TestSetError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(MANIFEST_KEYS))})")
    kinds = {"id": (str, "a string"), "system_prompt": (str, "a string"), "seed": (int, "a whole number"),
             "speaker": (str, "a string"), "extra_seconds": ((int, float), "a number")}
    for key, (kind, words) in kinds.items():
        if key in entry and (not isinstance(entry[key], kind) or isinstance(entry[key], bool)):
            raise TestSetError(f"{where}: {key} must be {words}")
    audio = (path.parent / entry["audio"]).expanduser()
    item_id = entry.get("id", Path(entry["audio"]).with_suffix("").as_posix())
    if any(part in ("", ".", "..") for part in item_id.split("/")):
        raise TestSetError(f"{where}: the id {item_id!r} must be a relative name (it names the item's folder)")
    try:  # the ranges every front end checks (docs/limits.md)
        checked_seed(entry.get("seed", 0))
        checked_prompt(entry.get("system_prompt", ""))
        GenerationConfig(extra_seconds=entry.get("extra_seconds"))
    except SettingError as e:
        raise TestSetError(f"{where}: {e}") from None
    extra, speaker = entry.get("extra_seconds"), entry.get("speaker")
    if speaker is not None and (path.parent / speaker).is_file():  # a reference WAV beside the manifest
        speaker = str(path.parent / speaker)
    return Item(item_id, audio, entry.get("system_prompt"), entry.get("seed"), speaker,
                None if extra is None else float(extra))


# ----------------------------------------------------------------------------------------------------------------
# the run: its settings, its folder, resuming
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSettings:
    """What every item is answered with (an item's manifest fields override prompt, seed, speaker, extra seconds)."""

    model: str
    demo_model: bool
    format: str
    system_prompt: str
    seed: int
    speaker: Optional[str]
    generation: GenerationConfig
    tools: tuple = ()  # voicechat.tools.Tool

    def described(self) -> dict:
        """The settings as run.json holds them: a rerun into the same folder must ask the same."""
        return {"model": self.model, "demo_model": self.demo_model, "format": self.format,
                "system_prompt": self.system_prompt, "seed": self.seed, "speaker": self.speaker,
                "generation_config": dataclasses.asdict(self.generation),
                "tools": sorted(tool.name for tool in self.tools)}


def prepare_output(out: Path, settings: RunSettings, source: Path) -> None:
    """Create ``out`` (its parent must exist) and record the run there; a folder holding a run with other settings is
    refused, since resuming it would mix two runs' answers."""
    if out.exists() and not out.is_dir():
        raise TestSetError(f"--out {out} is a file; give a folder")
    if not out.parent.is_dir():
        raise TestSetError(f"--out {out}: the folder {out.parent} does not exist; create it first")
    asked = {"input": str(source.resolve()), **settings.described()}
    run_file = out / RUN_FILE
    if run_file.is_file():
        before = json.loads(run_file.read_text(encoding="utf-8"))
        changed = [key for key in asked if before.get(key) != asked[key]]
        if changed:
            raise TestSetError(f"--out {out} holds a run with a different {', '.join(changed)}; give another --out, "
                               "or delete it to start over")
        return
    out.mkdir(exist_ok=True)
    write_files(out, {RUN_FILE: json_bytes(asked)})


def item_folder(out: Path, item: Item) -> Path:
    return out / ITEMS_FOLDER / item.id


def is_complete(folder: Path, fmt: str) -> bool:
    """The record is renamed last, so with it every other output is in place."""
    return (folder / RECORD_FILE).is_file() and all((folder / name).is_file() for name in output_names(fmt))


def output_names(fmt: str) -> tuple:
    return (ANSWER_FILE, FDB_WAV, FDB_JSON) if fmt == FDB else (ANSWER_FILE,)


def json_bytes(value) -> bytes:
    return (json.dumps(value, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def write_files(folder: Path, files: dict) -> None:
    """Each file written atomically, in the given order (the record last); what a killed write left behind (its
    temporary files: the item is being redone) is removed first."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(f".*{TEMPORARY}"):
        stale.unlink()
    for name, data in files.items():
        write_atomically(folder / name, data)


# ----------------------------------------------------------------------------------------------------------------
# Full-Duplex-Bench outputs
# ----------------------------------------------------------------------------------------------------------------
def benchmark_wav(audio: np.ndarray, rate: int, input_seconds: float) -> np.ndarray:
    """The answer on the input's timeline at 16 kHz, exactly as long as the input: an app-mode answer starts at the
    first position that hears the recording (Result.first_frame); resampled, then cut or padded with silence to the
    input's length (the timeline's last frame may pass its end)."""
    x = resample(np.asarray(audio, np.float32), rate, FDB_SAMPLE_RATE)
    n = round(input_seconds * FDB_SAMPLE_RATE)
    return np.pad(x[:n], (0, max(0, n - len(x))))


def timed_words(pieces: Sequence, turn_frames: Sequence[int]) -> list[tuple[str, int, int]]:
    """The assistant's words with the frames of their first and last token: (word, first frame, last frame).
    A word is a run of non-space characters of the text channel; a turn's start or end (BOS, EOS) also ends one.
    ``pieces``: [(frame, text), ...] in frame order."""
    chars: list[tuple[str, int]] = []
    boundaries = sorted(turn_frames)
    for frame, text in pieces:
        while boundaries and boundaries[0] < frame:  # a turn boundary before this token separates words
            chars.append((" ", boundaries.pop(0)))
        chars += [(c, frame) for c in text]
    words, current = [], []
    for c, frame in chars + [(" ", -1)]:
        if c.isspace():
            if current:
                words.append(("".join(ch for ch, _ in current), current[0][1], current[-1][1]))
            current = []
        else:
            current.append((c, frame))
    return words


def benchmark_transcript(pieces: Sequence, turn_frames: Sequence[int], first_input_frame: int,
                         input_seconds: float, words_from: float = 0.0) -> dict:
    """output.json in the benchmark's chunk format, {"text", "chunks": [{"text": word, "timestamp": [start, end]}]},
    from the text channel: a word starts where its first token's 80 ms frame starts and ends where its last token's
    frame ends, in seconds from the start of the recording (docs/batch.md §2). Words that start after the recording
    has ended are not in output.wav and are left out; ends are cut at its length. Words that start before
    ``words_from`` are left out too (user interruption: only the answer after it is scored)."""
    chunks = []
    for word, first, last in timed_words(pieces, turn_frames):
        start = round((first - first_input_frame) * FRAME_SECONDS, 3)
        if words_from <= start < input_seconds:
            end = round(min((last + 1 - first_input_frame) * FRAME_SECONDS, input_seconds), 3)
            chunks.append({"text": word, "timestamp": [start, end]})
    return {"text": " ".join(chunk["text"] for chunk in chunks), "chunks": chunks}


def interruption_end(item: Item) -> float:
    """Where a user-interruption sample's interruption ends (its interrupt.json: [{"timestamp": [start, end], ...}]),
    0 for other samples: the benchmark's ASR pass transcribes output.wav from there on (get_transcript/asr.py
    --task user_interruption), and its scoring reads that transcript's first word as the answer's onset."""
    found = [path for path in item.annotations if path.name == FDB_INTERRUPT]
    if not found:
        return 0.0
    try:
        return float(json.loads(found[0].read_text(encoding="utf-8"))[0]["timestamp"][1])
    except (ValueError, LookupError, TypeError):
        raise TestSetError(f"{item.id}/{FDB_INTERRUPT} holds no [{{\"timestamp\": [start, end]}}]") from None


# ----------------------------------------------------------------------------------------------------------------
# answering one item
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """One item's line of summary.jsonl."""

    id: str
    status: str  # "done" (answered now), "skipped" (complete from an earlier run), "failed"
    reason: str = ""  # failed: one line
    frames: int = 0  # timeline positions computed (system prompt included)
    input_seconds: float = 0.0
    wall_seconds: float = 0.0

    @property
    def timeline_seconds(self) -> float:
        return self.frames * FRAME_SECONDS

    def line(self) -> dict:
        from .answer import realtime_factor

        entry = {"id": self.id, "status": self.status}
        if self.status == "failed":
            return {**entry, "reason": self.reason}
        return {**entry, "frames": self.frames, "input_seconds": round(self.input_seconds, 3),
                "timeline_seconds": round(self.timeline_seconds, 3), "wall_seconds": round(self.wall_seconds, 3),
                "rtf": round(realtime_factor(self.wall_seconds, self.frames, FRAME_SECONDS), 4)}


def item_generation(item: Item, settings: RunSettings) -> GenerationConfig:
    """The run's config with the item's extra seconds; a Full-Duplex-Bench item is its input's timeline only."""
    if settings.format == FDB:
        return dataclasses.replace(settings.generation, extra_seconds=0.0)
    if item.extra_seconds is not None:
        return dataclasses.replace(settings.generation, extra_seconds=item.extra_seconds)
    return settings.generation


def read_item(item: Item, gen: GenerationConfig) -> tuple[np.ndarray, int]:
    """The item's samples and rate, checked as generate checks them (AudioInputError, one line)."""
    return read_recording(item.audio, gen.max_input_seconds)


def answer_files(model, item: Item, settings: RunSettings, samples: np.ndarray, rate: int, gen: GenerationConfig,
                 result, wall: float) -> dict:
    """Every output of an item, name -> bytes, the record last (it marks the item complete)."""
    from .answer import make_answer
    from .result import conversation_json

    answer = make_answer(model, result, wall)
    input_seconds = len(samples) / rate
    files = {ANSWER_FILE: wav_bytes(result.audio, result.sample_rate)}
    if settings.format == FDB:
        heard_from = result.prompt_frames  # the first position that hears the recording (docs/model.md §1.2 C)
        files[FDB_WAV] = wav_bytes(benchmark_wav(result.audio, result.sample_rate, input_seconds), FDB_SAMPLE_RATE)
        pieces = [(p.frame, p.text) for p in answer.text_pieces]
        files[FDB_JSON] = json_bytes(benchmark_transcript(pieces, answer.turn_starts + answer.turn_ends, heard_from,
                                                          input_seconds, interruption_end(item)))
        files.update({path.name: path.read_bytes() for path in item.annotations})
    record = conversation_json(answer, source="batch", model=settings.model, input_file=item.audio.name,
                               input_sample_rate=rate, input_seconds=input_seconds,
                               system_prompt=value(item.system_prompt, settings.system_prompt),
                               seed=value(item.seed, settings.seed), generation_config=gen, answer_file=ANSWER_FILE,
                               demo_model=settings.demo_model)
    files[RECORD_FILE] = json_bytes(record)
    return files


def value(own, run):
    return run if own is None else own


def recorded_outcome(item: Item, folder: Path) -> Outcome:
    """A complete item of an earlier run, as its record tells it."""
    record = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
    return Outcome(item.id, "skipped", frames=record["first_frame"] + len(record["text_tokens"]),
                   input_seconds=record["input_seconds"], wall_seconds=record["wall_seconds"])


# ----------------------------------------------------------------------------------------------------------------
# the runner
# ----------------------------------------------------------------------------------------------------------------
class BatchProgress:
    """Items finished of all, conversations in flight, ETA and RTF on stderr: on a terminal one line redrawn after
    every tick; into a file or a pipe (a log) a line of its own as each item finishes (as ``generate``'s bar does)."""

    def __init__(self, total: int, stream=None, width: int = 24):
        self.total, self.stream, self.width = total, stream or sys.stderr, width
        self.tty = self.stream.isatty()
        self.start = time.perf_counter()
        self.finished = 0  # items done, skipped or failed
        self.frames = 0  # timeline positions of the items answered so far
        self.drawn = 0  # characters of the last line drawn

    def item_finished(self, outcome: Outcome, running: Sequence["Running"]) -> None:
        self.finished += 1
        if outcome.status == "done":
            self.frames += outcome.frames
        self.draw(running)

    def update(self, running: Sequence["Running"]) -> None:
        if self.tty:
            self.draw(running)

    def draw(self, running: Sequence["Running"]) -> None:
        """ETA: the wall time so far per item finished, an item in flight counted by its positions; RTF: the wall
        time so far per timeline second computed (the items in flight included)."""
        from .answer import realtime_factor

        units = self.finished + sum(run.fraction for run in running)
        frames = self.frames + sum(run.session.position for run in running)
        elapsed = time.perf_counter() - self.start
        eta = duration_words(elapsed * (self.total - units) / units) if units > 0 else "?"
        rtf = f"{realtime_factor(elapsed, frames, FRAME_SECONDS):.2f}" if frames else "?"
        filled = self.width * self.finished // max(self.total, 1)
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.finished}/{self.total} items  "
                f"{len(running)} in flight  ETA {eta}  RTF {rtf}")
        self.stream.write("\r" + line.ljust(self.drawn) if self.tty else line + "\n")
        self.stream.flush()
        self.drawn = len(line) if self.tty else 0

    def say(self, message: str) -> None:
        """A line above the bar (a failed item)."""
        self.stream.write("\r" * self.tty + message.ljust(self.drawn) + "\n")
        self.drawn = 0

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


class Running:
    """An item in flight: its conversation in the group and the input still to give it (the model's recording set-up,
    ``Model.recording``: :class:`voicechat.timeline.recording.OfflineInput`)."""

    def __init__(self, model, group, item: Item, folder: Path, settings: RunSettings):
        self.item, self.folder, self.gen = item, folder, item_generation(item, settings)
        self.samples, self.rate = read_item(item, self.gen)
        self.t0 = time.perf_counter()
        self.input = model.recording(self.samples, self.rate, value(item.system_prompt, settings.system_prompt),
                                     value(item.seed, settings.seed), value(item.speaker, settings.speaker), self.gen,
                                     tools=settings.tools, group=group)
        self.session = self.input.session

    @property
    def fraction(self) -> float:
        return min(1.0, self.session.position / max(self.input.positions, 1))


def run_batch(model, items: Sequence[Item], out: Path, settings: RunSettings, sessions: int = 1,
              progress: Optional[BatchProgress] = None) -> list[Outcome]:
    """Answer every item not yet complete in ``out``, up to ``sessions`` conversations at once in one group's frame
    step (docs/batching.md; one at a time is a group of one); each is answered as ``generate`` answers it alone. A
    bad item is recorded with its reason and the run goes on. summary.jsonl is rewritten after each item, so an
    interrupted run keeps its lines."""
    group, waiting, running = model.sessions(sessions), list(reversed(items)), []
    outcomes: dict[str, Outcome] = {}
    t0 = time.perf_counter()

    def finish(outcome: Outcome) -> None:
        outcomes[outcome.id] = outcome
        if outcome.status == "failed":
            say = progress.say if progress is not None else lambda line: print(line, file=sys.stderr)
            say(f"{one_line(outcome.id)}: failed: {outcome.reason}")
        if progress is not None:
            progress.item_finished(outcome, running)
        write_summary(out, [outcomes[item.id] for item in items if item.id in outcomes], time.perf_counter() - t0)

    while waiting or running:
        while waiting and len(running) < sessions:
            item = waiting.pop()
            folder = item_folder(out, item)
            if is_complete(folder, settings.format):
                finish(recorded_outcome(item, folder))
                continue
            try:
                running.append(Running(model, group, item, folder, settings))
            except VoiceChatError as e:
                finish(failed(item, e))
        if not running:
            continue
        if all(run.session.waits_for_tool() for run in running):  # nothing can run until a tool answers
            running[0].session.settle()
        group.step()
        for run in list(running):
            try:
                if run.input.advance():
                    continue
                outcome = answered(model, run, settings)
            except VoiceChatError as e:
                run.session.close()
                outcome = failed(run.item, e)
            running.remove(run)
            finish(outcome)
        if progress is not None:
            progress.update(running)
    return [outcomes[item.id] for item in items]


def answered(model, run: Running, settings: RunSettings) -> Outcome:
    """A finished conversation: its files written, its line."""
    result, wall = run.input.result(), time.perf_counter() - run.t0
    write_files(run.folder, answer_files(model, run.item, settings, run.samples, run.rate, run.gen, result, wall))
    return Outcome(run.item.id, "done", frames=result.first_frame + len(result.text_tokens),
                   input_seconds=len(run.samples) / run.rate, wall_seconds=wall)


def failed(item: Item, e: Exception) -> Outcome:
    return Outcome(item.id, "failed", reason=one_line(str(e) or type(e).__name__))


def one_line(text: str) -> str:
    """``text`` whole on one line: a line break or other control character (a file's name may hold one) written as
    its escape, ``\\n``."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def totals(outcomes: Sequence[Outcome], wall_seconds: float) -> dict:
    """The totals line: counts, and the throughput of the items answered in this run."""
    done = [o for o in outcomes if o.status == "done"]
    timeline = sum(o.timeline_seconds for o in done)
    return {"totals": True, "items": len(outcomes), "done": len(done),
            "skipped": sum(o.status == "skipped" for o in outcomes),
            "failed": sum(o.status == "failed" for o in outcomes),
            "timeline_seconds": round(timeline, 3), "wall_seconds": round(wall_seconds, 3),
            "timeline_seconds_per_wall_second": round(timeline / wall_seconds, 4) if done else 0.0,
            "items_per_minute": round(60 * len(done) / wall_seconds, 3) if done else 0.0}


def write_summary(out: Path, outcomes: Sequence[Outcome], wall_seconds: float) -> None:
    lines = [o.line() for o in outcomes] + [totals(outcomes, wall_seconds)]
    write_files(out, {SUMMARY_FILE: "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()})


def summary_text(outcomes: Sequence[Outcome], wall_seconds: float, out: Path) -> str:
    """What the command prints at the end."""
    t = totals(outcomes, wall_seconds)
    lines = [f"{t['items']} items: {t['done']} answered, {t['skipped']} already complete, {t['failed']} failed"]
    lines += [f"  failed {one_line(o.id)}: {o.reason}" for o in outcomes if o.status == "failed"]
    if t["done"]:
        lines.append(f"{t['timeline_seconds_per_wall_second']:.3g} timeline seconds per wall second, "
                     f"{t['items_per_minute']:.3g} items per minute")
    lines.append(f"wrote {out / SUMMARY_FILE}")
    return "\n".join(lines)
