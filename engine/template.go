package engine

import (
	"errors"

	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/tokenizer/chat"
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
	// Chat renders the conversations; nil only for TemplateNone.
	Chat *chat.Template
	// Source is the template text Chat was parsed from: the model's, chat.ChatMLSource or
	// PlainTemplate.
	Source string
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

// Render writes a conversation as the model's prompt.
func (t Template) Render(msgs []chat.Message, opt chat.Options) (string, error) {
	if t.Chat == nil {
		return "", errors.New("the model has no tokenizer, so no chat template: give token ids")
	}
	return t.Chat.Render(msgs, opt)
}
