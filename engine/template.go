package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/tokenizer/chat"
	"github.com/dflash/dflash/tokenizer/ollamatmpl"
)

// TemplateKind says where a model's chat formatting comes from.
type TemplateKind int

const (
	// TemplateNone: the model has no tokenizer, so no text and no chat.
	TemplateNone TemplateKind = iota
	// TemplateModel: the folder's own chat template (tokenizer_config.json).
	TemplateModel
	// TemplateChatML: no template, but the vocabulary has ChatML's tokens, so the conversation
	// is written in ChatML, which such models were tuned on.
	TemplateChatML
	// TemplatePlain: neither (tiny story models); see PlainTemplate.
	TemplatePlain
	// TemplateOllama: the template layer of an ollama manifest (a Go text/template, rendered by
	// tokenizer/ollamatmpl), which ollama uses instead of the GGUF's own template.
	TemplateOllama
)

// PlainTemplate is the chat fallback for models with neither a chat template nor ChatML tokens
// (tiny story models): each message as "System: ...", "User: ..." or "Assistant: ..." (the role
// capitalised), separated by blank lines, and "Assistant:" to prompt the reply. It is a Jinja
// template run by the same interpreter as a model's own, so what /api/show shows is exactly
// what renders the prompt.
// The blank lines are string literals because chat templates run with trim_blocks, which drops
// a newline that follows a tag.
const PlainTemplate = "{% for message in messages %}{% if not loop.first %}{{ '\\n\\n' }}{% endif %}" +
	"{{ message['role'] | capitalize }}: {{ message['content'] }}{% endfor %}" +
	"{% if add_generation_prompt %}{% if messages %}{{ '\\n\\n' }}{% endif %}Assistant:{% endif %}"

// Template is a model's chat formatting and where it came from.
type Template struct {
	Kind TemplateKind
	// Chat renders the conversations (Jinja); nil for TemplateNone and TemplateOllama.
	Chat *chat.Template
	// Ollama renders them for TemplateOllama.
	Ollama *ollamatmpl.Template
	// Source is the template text Chat or Ollama was parsed from: the model's, chat.ChatMLSource,
	// PlainTemplate or the ollama layer's.
	Source string
	// System is the default system message (an ollama manifest's system layer): Render puts it
	// first in a conversation that has no system message of its own, as ollama does.
	System string
}

// chooseTemplate takes the folder's template, else ChatML when the vocabulary has its tokens,
// else the plain fallback; a model without a tokenizer has none.
func chooseTemplate(tc *hf.TokenizerConfig, tok tokenizer.Tokenizer) (Template, error) {
	if tok == nil {
		return Template{}, nil
	}
	if tc.ChatTemplate != "" {
		cc, err := chat.FromTokenizerConfig(tc)
		if err != nil {
			return Template{}, err
		}
		return Template{Kind: TemplateModel, Chat: cc.Template, Source: cc.Source}, nil
	}
	if _, ok := tok.TokenID("<|im_start|>"); ok {
		return Template{Kind: TemplateChatML, Chat: chat.ChatML(), Source: chat.ChatMLSource}, nil
	}
	return plainTemplate, nil
}

// plainTemplate is the fallback chooseTemplate gives a model with a tokenizer and no template.
var plainTemplate = Template{Kind: TemplatePlain, Chat: plainChat, Source: PlainTemplate}

// plainChat is PlainTemplate parsed once; it is read-only, so every model shares it.
var plainChat = func() *chat.Template {
	t, err := chat.Parse(PlainTemplate)
	if err != nil {
		panic("engine: built-in plain chat template does not parse: " + err.Error()) // our bug, not input
	}
	return t
}()

// String is the template's source as listings show it ("" without a tokenizer).
func (t Template) String() string { return t.Source }

// Render writes a conversation as the model's prompt, after the default system message when the
// conversation has none.
func (t Template) Render(msgs []chat.Message, opt chat.Options) (string, error) {
	if t.System != "" && !slices.ContainsFunc(msgs, func(m chat.Message) bool { return m.Role == "system" }) {
		msgs = append([]chat.Message{{Role: "system", Content: t.System}}, msgs...)
	}
	switch {
	case t.Ollama != nil:
		return t.Ollama.Render(msgs, opt)
	case t.Chat != nil:
		return t.Chat.Render(msgs, opt)
	}
	return "", errors.New("the model has no tokenizer, so no chat template: give token ids")
}

// ApplyOllama applies what an ollama manifest carries beside its model blob, as ollama does: the
// template layer replaces the chat template (ollama renders it, not the GGUF's Jinja one), the
// system layer becomes the default system message, and the params layer the default request
// options (Params: ollama option names, as in a request's "options"). A template that does not
// parse is refused naming the manifest. Nothing changes for a model without a tokenizer, which
// has no chat, except Params.
func (d *Description) ApplyOllama(om *ref.OllamaModel) error {
	if om == nil {
		return nil
	}
	if len(om.Params) > 0 {
		d.Params = om.Params
	}
	if d.Tok == nil {
		return nil
	}
	if om.Template != "" {
		t, err := ollamatmpl.Parse(om.Template)
		if err != nil {
			return fmt.Errorf("ollama %s: template layer (%s): %w", om.Name.Short(), om.Manifest, err)
		}
		d.Template = Template{Kind: TemplateOllama, Ollama: t, Source: om.Template}
	}
	d.Template.System = om.System
	return nil
}
