"""Tool calls on the function channel: declare tools, catch the model's calls, run them, feed the results back.

    @voicechat.tools.tool
    def get_weather(city: str) -> dict:
        '''The weather in a city now.

        Args:
            city: the city's name
        '''
        return {"city": city, "sky": "sunny", "temperature_c": 21}

    voicechat.tools.system_prompt("You are a helpful assistant.", [get_weather])   # what the model reads

The layout on the timeline, with its sources: docs/tools.md.
"""

from .builtin import BUILTIN_TOOLS, calculate, convert_units, get_current_time
from .channel import MAX_CALL_POSITIONS, MAX_RESPONSE_TOKENS, Plan, ToolCall, ToolChannel, ToolEvent
from .declare import MAX_TOOLS, Tool, load_tools_module, system_prompt, tool
from .runner import DEFAULT_TIMEOUT

__all__ = ["Tool", "tool", "system_prompt", "load_tools_module", "ToolChannel", "ToolCall", "ToolEvent", "Plan",
           "BUILTIN_TOOLS", "get_current_time", "calculate", "convert_units", "MAX_TOOLS", "MAX_CALL_POSITIONS",
           "MAX_RESPONSE_TOKENS", "DEFAULT_TIMEOUT"]
