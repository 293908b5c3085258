"""The web app's drawing pieces (HTML, SVG, CSS, small scripts): no Gradio, no model work."""
